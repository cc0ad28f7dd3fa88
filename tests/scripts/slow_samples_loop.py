"""A training loop that is almost always waiting for its next batch (each sample takes 0.2 s in one of 2 workers),
printing its pid and each batch: a test stops it (SIGSTOP) while it waits."""

import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowSamples(Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.2)
        return torch.tensor([index])


if __name__ == "__main__":
    print(f"pid {os.getpid()}", flush=True)
    for i, batch in enumerate(DataLoader(SlowSamples(), batch_size=2, num_workers=2)):
        print(f"batch {i} {batch.tolist()}", flush=True)
