"""A dataset that opens a gzip-compressed tar archive (`tarfile.open(path, "r:gz")`) in `__init__` and reads a member
per sample from 4 forked workers: they share one file offset under one gzip stream, so a worker's seek lands in
another's compressed block (`zlib.error: Error -3 while decompressing data: invalid block type`) at whatever member
it was on. `per-worker` (argv[2]) opens it in each worker."""

import io
import os
import sys
import tarfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

N = 1200


class Members(Dataset):
    def __init__(self, path, per_worker):
        self.path = path
        with tarfile.open(path, "r:gz") as archive:
            self.names = archive.getnames()
        self.tar = None if per_worker else tarfile.open(path, "r:gz")  # noqa: SIM115 - the shared handle under test

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        if self.tar is None:
            self.tar = tarfile.open(self.path, "r:gz")  # noqa: SIM115 - one per worker, closed at its exit
        return torch.from_numpy(np.frombuffer(self.tar.extractfile(self.names[i]).read(), dtype=np.float32).copy())


if __name__ == "__main__":
    root, per_worker = sys.argv[1], "per-worker" in sys.argv[2:]
    path = os.path.join(root, "data.tar.gz")
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as archive:
        for i in range(N):
            data = rng.random(2048, dtype=np.float32).tobytes()
            info = tarfile.TarInfo(f"{i:05d}.bin")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    total = sum(len(b) for b in DataLoader(Members(path, per_worker), batch_size=16, num_workers=4))
    print(f"samples {total}")
