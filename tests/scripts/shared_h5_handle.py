"""An HDF5 file opened in Dataset.__init__ through a Python file object (as fsspec users do), read by 4 forked
workers: they share the file object's descriptor and offset, and h5py fails with `OSError: Can't synchronously read
data (...)` at a different index each run, although every row loads alone."""

import os
import sys

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

N = 4000


class H5Rows(Dataset):
    def __init__(self, path):
        self.file = open(path, "rb")  # noqa: SIM115 - kept open: the bug this script shows
        self.h5 = h5py.File(self.file, "r")

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.from_numpy(self.h5["x"][i])


if __name__ == "__main__":
    path = os.path.join(sys.argv[1], "rows.h5")
    with h5py.File(path, "w") as f:
        rows = np.random.default_rng(0).random((N, 64), dtype=np.float32)
        f.create_dataset("x", data=rows, chunks=(1, 64), compression="gzip")
    loader = DataLoader(H5Rows(path), batch_size=16, num_workers=4, shuffle=True)
    for _epoch in range(10):
        for _batch in loader:
            pass
