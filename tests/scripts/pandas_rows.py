"""A dataset that indexes a pandas DataFrame per sample (`.iloc[i]`): its loading time is pandas' row building, not
the dataset's own code. Args: [rows] [numpy]: `numpy` reads the same columns as numpy arrays (the fixed twin)."""

import sys

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self, n, as_numpy):
        self.frame = pd.DataFrame({"a": np.arange(n, dtype=np.float32), "b": np.arange(n) % 7, "c": np.ones(n)})
        self.columns = [self.frame[c].to_numpy() for c in "abc"] if as_numpy else None

    def __len__(self):
        return len(self.frame)

    def __getitem__(self, i):
        if self.columns is not None:
            near = [(i + k) % len(self.columns[0]) for k in range(4)]
            return torch.tensor([float(sum(col[j] for j in near)) for col in self.columns])
        rows = [self.frame.iloc[(i + k) % len(self.frame)] for k in range(4)]  # the sample and its 3 neighbours
        return torch.tensor([sum(row[c] for row in rows) for c in "abc"])


if __name__ == "__main__":
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 80_000
    loader = DataLoader(Rows(rows, "numpy" in sys.argv[2:]), batch_size=64, num_workers=2)
    total = sum(float(batch.sum()) for batch in loader)
    print(f"total {total:.0f}")
