"""A torchrun job on CPU (gloo): each rank reads its share through a DistributedSampler with 2 workers.

--fail RANK:INDEX makes that rank's dataset raise on that index; --block RANK:INDEX makes it block forever there
(the other rank then waits in the all_reduce that ends every epoch); --die RANK:CODE makes that rank exit with CODE
before it builds its DataLoader; --raise-early RANK makes that rank raise there instead; --oom RANK:INDEX makes that
rank's worker allocate on that index until the kernel's OOM killer ends it (run it in a memory cgroup).
"""

import argparse
import os
import threading

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Squares(Dataset):
    def __init__(self, rank, fail, block, oom=None):
        self.rank, self.fail, self.block, self.oom = rank, fail, block, oom

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.fail == (self.rank, i):
            raise ValueError(f"sample {i} is corrupt")
        if self.block == (self.rank, i):
            threading.Event().wait()  # a read that never returns (a dead NFS mount, a lock never released)
        if self.oom == (self.rank, i):
            held = []
            while True:  # a sample that decodes to far more than memory holds
                held.append(bytearray(b"\x01") * (32 << 20))
        return torch.tensor([float(i * i)])


def rank_index(text):
    rank, index = text.split(":")
    return int(rank), int(index)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--fail", type=rank_index)
    parser.add_argument("--block", type=rank_index)
    parser.add_argument("--die", type=rank_index)
    parser.add_argument("--raise-early", type=int)
    parser.add_argument("--oom", type=rank_index)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.die and args.die[0] == rank:
        os._exit(args.die[1])
    if args.raise_early == rank:
        raise RuntimeError(f"no shard for rank {rank}")
    dataset = Squares(rank, args.fail, args.block, args.oom)
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, sampler=sampler)
    total = torch.zeros(1)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            total += batch.sum()
        dist.all_reduce(total)
    print(f"rank {rank}/{world} local {os.environ.get('LOCAL_RANK')} total {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
