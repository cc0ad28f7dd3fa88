"""A dataset that opens a shard file per sample and keeps the handle (a "cache" it never reads back): each worker's
open-descriptor count climbs until `OSError: [Errno 24] Too many open files` in a worker. The script lowers its own
RLIMIT_NOFILE to 320 so the limit is reached in seconds. `closed` reads each shard with `with open(...)`: no leak.
"""

import os
import resource
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class ShardDataset(Dataset):
    def __init__(self, root, n, keep_open):
        self.paths = [os.path.join(root, f"shard_{i:05d}.npy") for i in range(32)]
        self.n = n
        self.keep_open = keep_open
        self.handles = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        path = self.paths[i % len(self.paths)]
        if self.keep_open:
            f = open(path, "rb")  # noqa: SIM115 - the leak under test
            self.handles.append(f)
            array = np.load(f)
        else:
            with open(path, "rb") as f:
                array = np.load(f)
        time.sleep(0.02)  # a decode; also lets the supervisor read the climb a few times before the limit
        return torch.from_numpy(array[:4].copy())


if __name__ == "__main__":
    keep_open = "closed" not in sys.argv[1:]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (320, hard))
    with tempfile.TemporaryDirectory() as root:
        for i in range(32):
            np.save(os.path.join(root, f"shard_{i:05d}.npy"), np.arange(64, dtype=np.float32) + i)
        loader = DataLoader(ShardDataset(root, 1200, keep_open), batch_size=8, num_workers=2)
        total = 0.0
        for batch in loader:
            total += float(batch.sum())
        print(f"total {total}")
