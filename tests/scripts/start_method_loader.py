"""A loader with a chosen start method (argv[1]) whose dataset holds a large numpy array."""

import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class BigArrayDataset(Dataset):
    def __init__(self, megabytes):
        self.table = np.ones((megabytes * 1024 * 1024 // 8,), dtype=np.float64)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(self.table[i])])


if __name__ == "__main__":
    method = sys.argv[1]
    megabytes = int(sys.argv[2]) if len(sys.argv) > 2 else 96
    loader = DataLoader(BigArrayDataset(megabytes), batch_size=8, num_workers=2, multiprocessing_context=method)
    total = sum(float(b.sum()) for b in loader)
    print(f"total {total}")
