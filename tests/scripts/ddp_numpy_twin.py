"""torchrun, 2 ranks x 2 workers: the twin of ddp_leaky_list.py with the index in numpy arrays (nothing to copy)."""

import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class ArrayDataset(Dataset):
    def __init__(self, n):
        self.paths = np.array([f"/data/img_{i:09d}.jpg" for i in range(n)], dtype="S")
        self.labels = np.arange(n, dtype=np.int64) % 100

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.tensor([len(self.paths[i])]), int(self.labels[i])


if __name__ == "__main__":
    dist.init_process_group("gloo")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600_000
    dataset = ArrayDataset(n)
    loader = DataLoader(dataset, batch_size=1000, num_workers=2, sampler=DistributedSampler(dataset, shuffle=True))
    total = torch.zeros(1)
    for _x, y in loader:
        total += y.sum()
        dist.all_reduce(torch.ones(1))
        time.sleep(0.004)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} checksum {int(total.item())}", flush=True)
    dist.destroy_process_group()
