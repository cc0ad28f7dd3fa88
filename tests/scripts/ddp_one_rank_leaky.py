"""torchrun, any number of nodes and ranks x 2 workers: rank --leaky-rank keeps its dataset index as a list of
Python dicts (its forked workers copy the pages they touch: copy-on-write growth); every other rank keeps the same
data in numpy arrays, which its workers read without copying."""

import argparse
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RecordsDataset(Dataset):
    def __init__(self, n):
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        rec = self.records[i]
        return torch.tensor([len(rec["path"])]), rec["label"]


class ArrayDataset(Dataset):
    def __init__(self, n):
        self.labels = np.arange(n, dtype=np.int64) % 100

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.tensor([22]), int(self.labels[i])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--leaky-rank", type=int, default=0)
    parser.add_argument("--n", type=int, default=400_000)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = RecordsDataset(args.n) if rank == args.leaky_rank else ArrayDataset(args.n)
    loader = DataLoader(dataset, batch_size=1000, num_workers=2, sampler=DistributedSampler(dataset, shuffle=True))
    total = torch.zeros(1)
    for _x, y in loader:
        total += y.sum()
        dist.all_reduce(torch.ones(1))  # the gradients' all_reduce: every step waits for every rank
        time.sleep(0.004)
    dist.all_reduce(total)
    print(f"rank {rank} checksum {int(total.item())}", flush=True)
    dist.destroy_process_group()
