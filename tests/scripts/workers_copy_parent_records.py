"""Trains until a stop file appears (argv[1]); the parent holds 1.2M records as Python dicts, and each of 2 forked
workers reads its share of them slowly, so reference-count writes copy the parent's pages into the worker for
about 15 s (copy-on-write: Private_Dirty rises, Anonymous does not). gc.freeze() keeps the workers' garbage
collector from copying them all at once. Prints `first batch`, then `stopped after several batches`."""

import gc
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

PER_SAMPLE = 6000  # records read per sample


class RecordsDataset(Dataset):
    def __init__(self, n):
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]

    def __len__(self):
        return len(self.records) // PER_SAMPLE

    def __getitem__(self, i):
        chunk = self.records[i * PER_SAMPLE : (i + 1) * PER_SAMPLE]
        return torch.tensor([sum(r["label"] for r in chunk)])


if __name__ == "__main__":
    stop_file = sys.argv[1]
    dataset = RecordsDataset(1_200_000)
    gc.freeze()
    loader = DataLoader(dataset, batch_size=1, num_workers=2, prefetch_factor=2)
    batches = 0
    while not os.path.exists(stop_file):
        for _batch in loader:
            batches += 1
            if batches == 1:
                print("first batch", flush=True)
            if os.path.exists(stop_file):
                break
            time.sleep(0.08)  # a training step: 2 workers x ~6 samples/s x 6000 records
    print(f"stopped after {'several' if batches > 1 else 'one'} batches", flush=True)
