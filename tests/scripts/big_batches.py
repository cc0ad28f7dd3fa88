"""Batches of ~12 MiB moved through shared memory by 2 workers with a slow consumer."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.ones(3, 256, 256) * i


if __name__ == "__main__":
    loader = DataLoader(Images(), batch_size=16, num_workers=2, prefetch_factor=2)
    for _batch in loader:
        time.sleep(0.3)
    print("done")
