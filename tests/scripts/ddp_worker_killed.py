"""A torchrun job on CPU (gloo) whose rank 1 loses a DataLoader worker: the worker loading index --at (default 5)
kills itself with SIGKILL (what the OOM killer, a scheduler or kill -9 does), so rank 1's loop raises torch's
"DataLoader worker (pid N) is killed by signal: Killed." and the rank ends. --record wraps main() in torchelastic's
own @record, as many training scripts do; --own-error makes the script catch torch's error and raise its own
(a more specific error of the user's, which dlprobe must leave in the error file)."""

import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class DiesOnRankOne(Dataset):
    def __init__(self, rank, at):
        self.rank, self.at = rank, at

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.rank == 1 and i == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([float(i)])


def main(args):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = DiesOnRankOne(rank, args.at)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, sampler=DistributedSampler(dataset, shuffle=False))
    total = torch.zeros(1)
    try:
        for batch in loader:
            total += batch.sum()
    except RuntimeError as exc:
        if not args.own_error:
            raise
        raise ValueError(f"rank {rank}: shard 7 of the training set could not be read") from exc
    dist.all_reduce(total)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--at", type=int, default=5)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--own-error", action="store_true")
    parsed = parser.parse_args()
    (record(main) if parsed.record else main)(parsed)
    sys.exit(0)
