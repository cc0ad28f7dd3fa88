"""A script whose error reaches the user through the DataLoader, chosen by argv[1]:

worker     the dataset raises ValueError on index 5 in a worker process (argv[2]: num_workers, default 2)
main       the dataset raises ValueError on index 5 (num_workers=0, so the fetch runs in this process)
chained    the loop catches a worker's error and raises RuntimeError from it
interrupt  the loop gets a KeyboardInterrupt (as from Ctrl-C) while batches are in flight
"""

import os
import signal
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class BrokenAtFive(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 5:
            raise ValueError(f"corrupt record {i}")
        return torch.tensor([i])


def train(loader):
    for step, batch in enumerate(loader):
        if mode == "interrupt" and step == 1:
            os.kill(os.getpid(), signal.SIGINT)
        print("batch", batch.flatten().tolist(), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else (0 if mode == "main" else 2)
    loader = DataLoader(BrokenAtFive(), batch_size=2, num_workers=workers)
    if mode == "chained":
        try:
            train(loader)
        except ValueError as exc:
            raise RuntimeError("training failed") from exc
    elif mode == "interrupt":
        loader = DataLoader(list(range(16)), batch_size=2, num_workers=workers)
        train(loader)
    else:
        train(loader)
