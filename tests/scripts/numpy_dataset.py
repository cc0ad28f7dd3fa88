"""The same data as leaky_list_dataset.py, kept in numpy arrays: no copy-on-access growth."""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class ArrayDataset(Dataset):
    def __init__(self, n):
        self.paths = np.array([f"/data/img_{i:09d}.jpg" for i in range(n)], dtype="S")
        self.labels = np.arange(n, dtype=np.int64) % 100

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return torch.tensor([len(self.paths[i])]), int(self.labels[i])


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600_000
    loader = DataLoader(ArrayDataset(n), batch_size=1000, shuffle=True, num_workers=2)
    checksum = 0
    for _x, y in loader:
        checksum += int(y.sum())
        time.sleep(0.004)
    print(f"checksum {checksum}")
