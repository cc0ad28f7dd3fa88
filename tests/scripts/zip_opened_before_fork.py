"""A dataset that opens a zip archive (zipfile.ZipFile) in `__init__` and reads a member per sample from 4 forked
workers: they share one file offset, so a worker's seek and read interleave with another's (`BadZipFile: Bad magic
number`, `zlib.error`, a CRC error) at whatever member it was on. `per-worker` (argv[2:]) opens it in each
worker; `stored` writes the members uncompressed (the errors are then zipfile's own: `Bad CRC-32`)."""

import os
import sys
import zipfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

N = 1500


class Members(Dataset):
    def __init__(self, path, per_worker):
        self.path = path
        self.archive = None if per_worker else zipfile.ZipFile(path)
        self.names = [f"{i:05d}.bin" for i in range(N)]

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.archive is None:
            self.archive = zipfile.ZipFile(self.path)
        return torch.from_numpy(np.frombuffer(self.archive.read(self.names[i]), dtype=np.float32).copy())


if __name__ == "__main__":
    root, per_worker, stored = sys.argv[1], "per-worker" in sys.argv[2:], "stored" in sys.argv[2:]
    path = os.path.join(root, "data.zip")
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as z:
        for i in range(N):
            z.writestr(f"{i:05d}.bin", rng.random(2048, dtype=np.float32).tobytes())
    total = sum(len(b) for b in DataLoader(Members(path, per_worker), batch_size=16, num_workers=4))
    print(f"samples {total}")
