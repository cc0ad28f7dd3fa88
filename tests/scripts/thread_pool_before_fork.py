"""A dataset that decodes through a concurrent.futures.ThreadPoolExecutor created in `__init__` and used once in the
parent (its threads start there): the forked workers inherit the executor but not its threads, so their first
`submit(...).result()` waits forever. `per-worker` (argv[1]) creates the pool in each worker."""

import sys
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import DataLoader, Dataset


def decode(i):
    return [float(i)] * 8


class Pooled(Dataset):
    def __init__(self, per_worker):
        self.pool = None if per_worker else ThreadPoolExecutor(max_workers=1)
        if self.pool is not None:
            self.pool.submit(decode, 0).result()  # warm-up in the parent: the pool's threads start here

    def __len__(self):
        return 512

    def __getitem__(self, i):
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1)
        return torch.tensor(self.pool.submit(decode, i).result())


if __name__ == "__main__":
    per_worker = len(sys.argv) > 1 and sys.argv[1] == "per-worker"
    total = sum(len(b) for b in DataLoader(Pooled(per_worker), batch_size=16, num_workers=2))
    print(f"samples {total}")
