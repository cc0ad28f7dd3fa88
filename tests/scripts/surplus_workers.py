"""A loader far ahead of its training loop: cheap samples, a 20 ms step, and workers that each hold a 100 MiB table
(built in worker_init_fn, so private to each worker).

Args: [num_workers] [batches]. With 8 workers, 1 would keep the loop fed and the other 7 hold ~700 MiB for no speed.
"""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Lookup(Dataset):
    def __init__(self):
        self.table = None

    def __len__(self):
        return 16 * 1000

    def __getitem__(self, i):
        time.sleep(0.0002)  # a quick read
        return torch.tensor([float(self.table[i % len(self.table)])])


def load_table(_worker_id):
    get_worker_info().dataset.table = np.ones(100 * 2**20 // 8)  # written, so private to the worker


if __name__ == "__main__":
    num_workers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 80
    loader = DataLoader(Lookup(), batch_size=16, num_workers=num_workers, worker_init_fn=load_table)
    total = 0.0
    for step, batch in enumerate(loader):
        time.sleep(0.02)  # the model's step: an accelerator busy, the host waiting
        total += float(batch.sum())
        if step + 1 == batches:
            break
    print(f"total {total:.0f}")
