"""Sample 13 takes SECONDS (argv[1], default 5) to load in a worker, then the epoch finishes normally."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        if i == 13:
            time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)
        return torch.tensor([i])


if __name__ == "__main__":
    seen = sum(len(batch) for batch in DataLoader(SlowDataset(), batch_size=2, num_workers=2))
    print(f"done: {seen} samples")
