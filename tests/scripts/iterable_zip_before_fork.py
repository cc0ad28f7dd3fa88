"""An IterableDataset that opens a zip archive in `__init__` and streams its members, each of 4 forked workers its
own shard (every 4th member): the workers share the archive's one file offset, so reads fail at random
(`BadZipFile`, `zlib.error`). There is no index to blame. `per-worker` (argv[2]) opens the archive in `__iter__`.
`bad` (argv[2]) has a correct per-worker archive but raises on member 250 (a bad record every run)."""

import os
import sys
import zipfile

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

N = 1500


class Stream(IterableDataset):
    def __init__(self, path, mode):
        self.path, self.mode = path, mode
        self.archive = None if mode in ("per-worker", "bad") else zipfile.ZipFile(path)

    def __iter__(self):
        info = get_worker_info()
        archive = self.archive or zipfile.ZipFile(self.path)
        for k in range(info.id, N, info.num_workers):
            if self.mode == "bad" and k == 250:
                raise ValueError(f"record {k} has a negative length")
            data = archive.read(f"{k:05d}.bin")
            yield torch.from_numpy(np.frombuffer(data, dtype=np.float32).copy())


if __name__ == "__main__":
    root, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "shared"
    path = os.path.join(root, "data.zip")
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for i in range(N):
            z.writestr(f"{i:05d}.bin", rng.random(2048, dtype=np.float32).tobytes())
    total = sum(len(b) for b in DataLoader(Stream(path, mode), batch_size=16, num_workers=4))
    print(f"samples {total}")
