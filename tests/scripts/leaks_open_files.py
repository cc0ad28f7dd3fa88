"""A dataset that opens a shard file per sample and never closes it: each of 2 workers (open-file limit 96, set in
worker_init_fn) fails with `OSError: [Errno 24] Too many open files` after about 90 samples, at whatever index it
is on. Every sample loads alone. Tensors travel through the file system (not descriptors), so only the dataset's
own files run out."""

import os
import resource
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

torch.multiprocessing.set_sharing_strategy("file_system")
SHARDS = 64


class Shards(Dataset):
    def __init__(self, root):
        self.root = root
        self.opened = []

    def __len__(self):
        return 6400

    def __getitem__(self, i):
        f = open(os.path.join(self.root, f"shard{i % SHARDS}.npy"), "rb")  # noqa: SIM115 - the leak shown
        self.opened.append(f)
        return torch.from_numpy(np.load(f)[i // SHARDS : i // SHARDS + 1].copy())


def low_limit(worker_id):
    resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))


if __name__ == "__main__":
    root = sys.argv[1]
    for s in range(SHARDS):
        np.save(os.path.join(root, f"shard{s}.npy"), np.arange(100, dtype=np.float32) + s)
    for _batch in DataLoader(Shards(root), batch_size=16, num_workers=2, worker_init_fn=low_limit):
        pass
