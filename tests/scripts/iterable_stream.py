"""An IterableDataset read by 2 workers, with or without get_worker_info sharding. Args: sharded|unsharded."""

import sys

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Stream(IterableDataset):
    def __init__(self, n, sharded):
        self.n = n
        self.sharded = sharded

    def __iter__(self):
        start, step = 0, 1
        info = get_worker_info()
        if self.sharded and info is not None:
            start, step = info.id, info.num_workers
        for i in range(start, self.n, step):
            yield torch.tensor([i, i * i], dtype=torch.float32), i % 7


if __name__ == "__main__":
    sharded = sys.argv[1] == "sharded"
    loader = DataLoader(Stream(400, sharded), batch_size=10, num_workers=2)
    seen = [int(x[0]) for batch, _ in loader for x in batch]
    print(f"samples {len(seen)} unique {len(set(seen))}")
