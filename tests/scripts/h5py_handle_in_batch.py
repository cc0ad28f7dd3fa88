"""A collate_fn that puts the h5py dataset the samples came from into every batch (as `source`, for bookkeeping).
Collate runs in the worker, where the batch is fine; the worker's queue then pickles it in a background thread,
h5py refuses (`TypeError: h5py objects cannot be pickled`), the thread prints that on the worker's stderr and drops
the batch. The training loop waits for batch 0 forever: every sample loads, and no worker is stuck."""

import sys

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class H5Frames(Dataset):
    def __init__(self, path):
        self.path = path
        self.file = None

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.file is None:  # opened in the worker: the usual h5py advice, followed
            self.file = h5py.File(self.path, "r")
        return torch.from_numpy(self.file["frames"][i]), self.file["frames"]


def collate(samples):
    return {"frames": torch.stack([x for x, _ in samples]), "source": samples[0][1]}


if __name__ == "__main__":
    path = sys.argv[1]
    with h5py.File(path, "w") as f:
        f["frames"] = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    loader = DataLoader(H5Frames(path), batch_size=8, num_workers=2, collate_fn=collate)
    for batch in loader:
        print(batch["frames"].shape)
