"""Trains until a stop file appears (argv[1]); each of 2 forked workers keeps every sample it makes in an unbounded
cache, ~16 MiB a second each (new anonymous memory, not copy-on-write), up to a cap so a forgotten run stays
bounded. Prints `first batch` once training has started and `stopped after N batches` at the end: a job to attach
to while it runs."""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_BYTES = 1024 * 1024
CAP_BYTES = 640 * 1024 * 1024  # per worker


class CachingDataset(Dataset):
    def __init__(self):
        self.cache = []  # empty in the parent; fills separately in each worker

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if len(self.cache) * SAMPLE_BYTES < CAP_BYTES:
            self.cache.append(bytearray(b"x") * SAMPLE_BYTES)  # the "decoded" sample, kept forever
        return torch.tensor([i])


if __name__ == "__main__":
    stop_file = sys.argv[1]
    loader = DataLoader(CachingDataset(), batch_size=2, num_workers=2, prefetch_factor=2)
    batches = 0
    for _batch in loader:
        batches += 1
        if batches == 1:
            print("first batch", flush=True)
        if os.path.exists(stop_file):
            break
        time.sleep(0.06)  # a training step: 2 workers x ~8 batches/s x 1 MiB
    print(f"stopped after {'several' if batches > 1 else 'one'} batches", flush=True)
