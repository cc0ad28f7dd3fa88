"""A dataset that opens an LMDB environment (`lmdb.open`) in `__init__` and reads it from 4 forked workers: LMDB's
own docs forbid using an environment across fork (its reader-lock slots and mappings belong to the opening process);
workers fail in lmdb itself (`lmdb.BadRslotError: mdb_txn_begin: MDB_BAD_RSLOT`, `lmdb.Error ... Invalid argument`)
on whatever index they were on. `per-worker` (argv[2]) opens it lazily in each worker."""

import os
import sys

import lmdb
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

N = 800


class Records(Dataset):
    def __init__(self, path, per_worker):
        self.path = path
        self.env = None
        if not per_worker:
            self.env = lmdb.open(path, readonly=True, lock=True)
            with self.env.begin() as txn:  # a read in the parent: its reader slot crosses the fork
                self.n = int(txn.get(b"__len__"))
        else:
            with lmdb.open(path, readonly=True, lock=True) as env, env.begin() as txn:
                self.n = int(txn.get(b"__len__"))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=True)
        with self.env.begin() as txn:
            raw = txn.get(f"{i:06d}".encode())
        return torch.from_numpy(np.frombuffer(raw, dtype=np.float32).copy())


if __name__ == "__main__":
    root, per_worker = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "per-worker"
    path = os.path.join(root, "data.lmdb")
    rng = np.random.default_rng(0)
    with lmdb.open(path, map_size=1 << 28) as env, env.begin(write=True) as txn:
        for i in range(N):
            txn.put(f"{i:06d}".encode(), rng.random(512, dtype=np.float32).tobytes())
        txn.put(b"__len__", str(N).encode())
    total = sum(len(b) for b in DataLoader(Records(path, per_worker), batch_size=16, num_workers=4))
    print(f"samples {total}")
