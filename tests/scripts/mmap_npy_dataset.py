"""The copy-on-write fix: a .npy written to a directory (argv[1]: on disk or /dev/shm), read by 2 forked workers
through np.lib.format.open_memmap(mode='r'), so their pages are file-backed (or tmpfs) and shared."""

import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROWS, COLS = 400_000, 64  # ~98 MiB of float32: each worker maps about half of it


class MappedArrayDataset(Dataset):
    def __init__(self, path):
        self.path = path
        self.array = None  # opened in each worker on first use: the mapping is not inherited

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        if self.array is None:
            self.array = np.lib.format.open_memmap(self.path, mode="r")
        return torch.from_numpy(np.array(self.array[i])), i % 10


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(dir=sys.argv[1]) as tmp:
        path = os.path.join(tmp, "features.npy")
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ROWS, COLS))
        for start in range(0, ROWS, 50_000):  # in chunks, so the parent holds no full copy in anonymous memory
            out[start : start + 50_000] = np.random.default_rng(start).random((50_000, COLS), dtype=np.float32)
        out.flush()
        del out
        loader = DataLoader(MappedArrayDataset(path), batch_size=1000, shuffle=True, num_workers=2)
        total = 0.0
        for x, _y in loader:
            total += float(x[:, 0].sum())
            time.sleep(0.004)
        print(f"batches {len(loader)} total {total:.1f}")
