"""New allocations, not copy-on-write: each of 2 forked workers keeps every sample it decodes in an unbounded
cache (~200 KiB per batch of 100)."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class CachingDataset(Dataset):
    def __init__(self, n):
        self.n = n
        self.cache = {}  # empty in the parent; fills separately in each worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i not in self.cache:
            self.cache[i] = bytes(2048) + i.to_bytes(8, "little")  # the "decoded" sample, kept forever
        return torch.tensor([len(self.cache[i])]), i % 10


if __name__ == "__main__":
    loader = DataLoader(CachingDataset(120_000), batch_size=100, shuffle=True, num_workers=2)
    checksum = 0
    for _x, y in loader:
        checksum += int(y.sum())
        time.sleep(0.002)
    print(f"checksum {checksum}")
