"""Samples that are dicts of many small tensors: cheap to build, dear to hand over to the main process.

Args: [num_workers] [batches]. Each sample waits 2 ms on a "read" and is 64 tensors of 4 floats; a batch of 16 is 64
stacked tensors, each its own shared-memory file whose descriptor the main process fetches from the worker that built
it. Workers overlap their reads, but the main process takes the batches in on one thread, one tensor at a time.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

FIELDS = 64


class ManyTensors(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.002)
        return {f"f{k}": torch.full((4,), float(i)) for k in range(FIELDS)}


if __name__ == "__main__":
    num_workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    loader = DataLoader(ManyTensors(16 * batches), batch_size=16, num_workers=num_workers)
    total = 0.0
    for batch in loader:
        total += float(batch["f0"].sum())
    print(f"total {total:.0f}")
