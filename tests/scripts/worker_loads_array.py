"""Each of 2 forked workers loads the same 96 MiB feature table in worker_init_fn (np.load): two private copies.
argv[1] "load" does that; "mmap" maps the file instead (np.load(mmap_mode='r')): one copy, shared page cache."""

import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

PATH = os.path.join(tempfile.mkdtemp(prefix="dlprobe-features-"), "features.npy")


class Features(Dataset):
    def __init__(self, mode):
        self.mode, self.table = mode, None

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return torch.from_numpy(np.array(self.table[i % len(self.table)][:4]))


def load_table(_worker_id):
    dataset = get_worker_info().dataset
    dataset.table = np.load(PATH, mmap_mode="r" if dataset.mode == "mmap" else None)
    if dataset.mode == "mmap":
        dataset.table.sum()  # read it all, as the copy does: file pages, shared with every process


if __name__ == "__main__":
    np.save(PATH, np.ones((3072, 8192), dtype=np.float32))  # 96 MiB
    loader = DataLoader(Features(sys.argv[1]), batch_size=64, num_workers=2, worker_init_fn=load_table)
    total = 0.0
    for batch in loader:
        total += float(batch.sum())
        time.sleep(0.08)  # a training step: the epoch lasts ~5 s
    os.unlink(PATH)
    os.rmdir(os.path.dirname(PATH))
    print(f"total {total}")
