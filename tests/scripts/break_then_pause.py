"""Leaves the loop with `break` after a few batches, then works without the loader for a while (no hang)."""

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.arange(64)), batch_size=4, num_workers=2)
    for n, _batch in enumerate(loader):
        if n == 3:
            break
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0)  # e.g. saving a checkpoint
    print("saved")
