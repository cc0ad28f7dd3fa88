"""Prints a line per batch for a few seconds (2 workers), then "done": its output must come through whole whatever
happens to the run directory."""

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    loader = DataLoader(TensorDataset(torch.arange(batches * 4)), batch_size=4, num_workers=2)
    for i, (x,) in enumerate(loader):
        print(f"batch {i} sum {int(x.sum())}", flush=True)
        time.sleep(0.02)
    print("done")
