"""A dataset that opens its storage in `__init__` and is read by 4 forked workers: every worker inherits the same open
file description (offset, locks, the library's state). `h5py` (default): an HDF5 file opened through a Python file
object, as fsspec users do; reads fail at random indices (`OSError: Can't synchronously read data`). `lmdb`: an LMDB
environment; `lmdb.ReadersFullError: MDB_READERS_FULL`. `read-first` (lmdb) reads it once in the parent too, so its
reader slot crosses the fork (`lmdb.BadRslotError: MDB_BAD_RSLOT`, `lmdb.Error ... Invalid argument` in the workers).
`per-worker` opens it lazily in each worker: nothing shared.
"""

import os
import sys
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

N = 6000


class H5Dataset(Dataset):
    def __init__(self, path, per_worker):
        import h5py

        self.path = path
        with h5py.File(path, "r") as f:
            self.n = len(f["x"])
        self.fobj = self.h5 = None
        if not per_worker:
            self.fobj = open(path, "rb")  # noqa: SIM115 - the shared handle under test
            self.h5 = h5py.File(self.fobj, "r")

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.h5 is None:
            import h5py

            self.h5 = h5py.File(open(self.path, "rb"), "r")  # noqa: SIM115 - one per worker, closed at its exit
        return torch.from_numpy(self.h5["x"][i])


class LmdbDataset(Dataset):
    def __init__(self, path, per_worker, read_first=False):
        import lmdb

        self.path = path
        self.env = None
        if not per_worker:
            self.env = lmdb.open(path, readonly=True, lock=True)
            if read_first:  # a read in the parent: its reader slot crosses the fork
                with self.env.begin() as txn:
                    txn.get(f"{0:08d}".encode())
        self.n = N

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.env is None:
            import lmdb

            self.env = lmdb.open(self.path, readonly=True, lock=True)
        with self.env.begin() as txn:
            return torch.from_numpy(np.frombuffer(txn.get(f"{i:08d}".encode()), dtype="f4").copy())


def write_h5(root):
    import h5py

    path = os.path.join(root, "data.h5")
    with h5py.File(path, "w") as f:
        rows = np.random.default_rng(0).random((N, 64), dtype=np.float32)
        f.create_dataset("x", data=rows, chunks=(16, 64), compression="gzip")
    return path


def write_lmdb(root):
    import lmdb

    env = lmdb.open(root, map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i in range(N):
            txn.put(f"{i:08d}".encode(), np.full(64, i, dtype=np.float32).tobytes())
    env.close()
    return root


if __name__ == "__main__":
    kind = "lmdb" if "lmdb" in sys.argv[1:] else "h5py"
    per_worker, read_first = "per-worker" in sys.argv[1:], "read-first" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as root:
        build = {
            "lmdb": lambda: LmdbDataset(write_lmdb(root), per_worker, read_first),
            "h5py": lambda: H5Dataset(write_h5(root), per_worker),
        }
        dataset = build[kind]()
        total = 0.0
        for batch in DataLoader(dataset, batch_size=16, num_workers=4, shuffle=True):
            total += float(batch.sum())
        print(f"total {total:.1f}")
