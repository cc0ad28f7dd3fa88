"""I/O-bound loading: each sample waits 8 ms on a "remote" read (a sleep) and uses almost no CPU.

Args: [num_workers] [batches]. The workers sleep most of the time, so more workers than cores still help.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RemoteBlobs(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.008)  # object storage / a network file system answering
        return torch.full((8,), float(i))


if __name__ == "__main__":
    num_workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    loader = DataLoader(RemoteBlobs(16 * batches), batch_size=16, num_workers=num_workers)
    total = 0.0
    for x in loader:
        total += float(x.sum())
    print(f"total {total:.0f}")
