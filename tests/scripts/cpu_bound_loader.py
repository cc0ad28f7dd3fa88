"""CPU-bound loading: each sample spins 2 ms of CPU time in its transform and reads nothing.

Args: [num_workers] [batches]. The workers are on the CPU all the time: more workers than cores cannot help.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


def expensive_transform(i):
    deadline = time.process_time() + 0.002
    x = i
    while time.process_time() < deadline:
        x = (x * 1103515245 + 12345) % 2**31
    return x


class CpuBoundDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((8,), float(expensive_transform(i) % 7))


if __name__ == "__main__":
    num_workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    loader = DataLoader(CpuBoundDataset(16 * batches), batch_size=16, num_workers=num_workers)
    total = 0.0
    for x in loader:
        total += float(x.sum())
    print(f"total {total:.0f}")
