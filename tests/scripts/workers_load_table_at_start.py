"""Each forked worker builds its own lookup table in worker_init_fn (argv[1] MiB, default 350): a one-time load at
start, then flat memory; __getitem__ waits 2 ms on a read. Under a memory limit, a few workers fit and more do not."""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Lookup(Dataset):
    def __init__(self, table_mib):
        self.table_mib, self.table = table_mib, None

    def __len__(self):
        return 20_000

    def __getitem__(self, i):
        time.sleep(0.002)  # a read from remote storage
        return torch.tensor([float(self.table[(i * 4099) % len(self.table)])])


def load_table(_worker_id):
    dataset = get_worker_info().dataset
    dataset.table = np.ones(dataset.table_mib * 2**20 // 8, dtype=np.float64)  # written, so private to the worker


if __name__ == "__main__":
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 350
    loader = DataLoader(Lookup(mib), batch_size=32, num_workers=2, worker_init_fn=load_table)
    for step, _batch in enumerate(loader):
        if step == 50:
            break
    print("done")
