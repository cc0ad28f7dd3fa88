"""A torchrun job on CPU (gloo) whose ranks all_reduce every step, as DDP does: --slow-rank R makes rank R's dataset
sleep --slow-s per sample (a slower disk on its node) while the others sleep --fast-s; without it every rank sleeps
--fast-s (even ranks). Shuffled by a DistributedSampler with set_epoch, so each rank reads other samples each epoch."""

import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Reads(Dataset):
    def __init__(self, sleep_s):
        self.sleep_s = sleep_s

    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(self.sleep_s)  # a read that waits on its disk: I/O, not CPU
        return torch.tensor([float(i)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow-rank", type=int)
    parser.add_argument("--slow-s", type=float, default=0.03)
    parser.add_argument("--fast-s", type=float, default=0.002)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = Reads(args.slow_s if rank == args.slow_rank else args.fast_s)
    sampler = DistributedSampler(dataset, shuffle=True, seed=1)
    loader = DataLoader(dataset, batch_size=2, num_workers=1, sampler=sampler)
    total = torch.zeros(1)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            step = batch.sum().reshape(1)
            dist.all_reduce(step)  # the gradient all_reduce: every rank steps at the slowest rank's pace
            total += step
    print(f"rank {rank} total {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
