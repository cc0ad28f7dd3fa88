"""Expensive samples: 2 ms of CPU in expensive_transform plus a 2 ms read; the loop's own step is 2 ms.

Args: [num_workers] [batches]. The read (a sleep) keeps the speed-up from workers visible on a busy machine.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


def read_sample(i):
    time.sleep(0.002)
    return i


def expensive_transform(i):
    deadline = time.process_time() + 0.002
    x = i
    while time.process_time() < deadline:
        x = (x * 1103515245 + 12345) % 2**31
    return x


class CpuHeavyDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        expensive_transform(read_sample(i))
        return torch.full((8,), float(i)), i % 10


if __name__ == "__main__":
    num_workers = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    loader = DataLoader(CpuHeavyDataset(16 * batches), batch_size=16, num_workers=num_workers)
    total = 0
    for _x, y in loader:
        total += int(y.sum())
        time.sleep(0.002)  # the training step
    print(f"total {total}")
