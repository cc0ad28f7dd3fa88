"""Iterates a loader with workers at the script's top level, without `if __name__ == "__main__":`: fine under fork;
under spawn and forkserver each worker re-runs the script and dies at the loop ("bootstrapping phase")."""

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.arange(32.0)), batch_size=8, num_workers=1)
print("total", sum(float(b[0].sum()) for b in loader))  # the line a worker re-running the script dies at
