"""A torchrun job on CPU (gloo): each rank reads its share through a DistributedSampler with 2 workers."""

import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, sampler=DistributedSampler(Squares()))
    total = torch.zeros(1)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            total += batch.sum()
    dist.all_reduce(total)
    print(f"rank {rank}/{world} local {os.environ.get('LOCAL_RANK')} total {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
