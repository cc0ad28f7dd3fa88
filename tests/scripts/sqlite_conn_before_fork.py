"""A dataset that opens a sqlite3 connection in `__init__` (the database is written first) and reads one row per
sample from 4 forked workers: every worker inherits the parent's connection (one descriptor, one page cache, one
lock state). `per-worker` (argv[2]) opens the connection lazily in each worker: nothing shared."""

import os
import sqlite3
import sys

import torch
from torch.utils.data import DataLoader, Dataset

N = 4000


class Rows(Dataset):
    def __init__(self, path, per_worker):
        self.path = path
        self.db = None if per_worker else sqlite3.connect(path, check_same_thread=False)
        if self.db is not None:
            self.db.execute("select count(*) from rows").fetchone()

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.db is None:
            self.db = sqlite3.connect(self.path)
        (blob,) = self.db.execute("select x from rows where i = ?", (i,)).fetchone()
        return torch.frombuffer(bytearray(blob), dtype=torch.float32)


if __name__ == "__main__":
    root, per_worker = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "per-worker"
    path = os.path.join(root, "rows.db")
    con = sqlite3.connect(path)
    con.execute("create table rows (i integer primary key, x blob)")
    con.executemany("insert into rows values (?, ?)", ((i, bytes(256)) for i in range(N)))
    con.commit()
    con.close()
    total = sum(len(b) for b in DataLoader(Rows(path, per_worker), batch_size=32, num_workers=4))
    print(f"samples {total}")
