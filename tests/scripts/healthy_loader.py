"""A loader with nothing to fix: float32 features, scalar int64 labels, cheap samples, 2 workers, 2 epochs."""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class FeatureDataset(Dataset):
    def __init__(self, n):
        rng = np.random.default_rng(0)
        self.features = rng.standard_normal((n, 64)).astype(np.float32)
        self.labels = rng.integers(0, 10, n)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.features[i]), int(self.labels[i])


if __name__ == "__main__":
    loader = DataLoader(FeatureDataset(640), batch_size=32, shuffle=True, num_workers=2)
    total = 0
    for _epoch in range(2):
        for _x, y in loader:
            total += int(y.sum())
            time.sleep(0.02)  # the training step dominates
    print(f"total {total}")
