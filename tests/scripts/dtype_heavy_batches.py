"""Batches wider than needed: float64 features and int64 'pixels' (values 0..255), plus scalar int64 labels."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class WideDataset(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        features = np.full((3, 32, 32), i / 256)  # numpy's default float64
        pixels = torch.arange(32 * 32).reshape(32, 32) % 256  # int64 values that fit in uint8
        return torch.from_numpy(features), pixels, i % 10


if __name__ == "__main__":
    loader = DataLoader(WideDataset(), batch_size=32, num_workers=0)
    dtypes = [tuple(str(t.dtype) for t in batch) for batch in loader]
    print(dtypes[0])
