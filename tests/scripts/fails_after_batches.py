"""Iterates a few batches, prints them, then fails with the exit code given (or raises with 'raise')."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.arange(32)), batch_size=8, num_workers=2)
    for (batch,) in loader:
        print(batch.tolist())
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "raise":
        raise ValueError("bad learning rate")
    sys.exit(int(sys.argv[1]))
