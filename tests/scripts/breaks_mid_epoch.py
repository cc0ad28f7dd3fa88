"""Breaks out of its first epoch after 20 of 160 batches, with the garbage collector off, and prints how many worker
processes are still alive: torch stops them as the loop drops the iterator, so 0 (the probe must keep it so)."""

import gc
import multiprocessing

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    gc.disable()  # no collection to hide a reference cycle that keeps the iterator, and its workers, alive
    loader = DataLoader(TensorDataset(torch.arange(1_280.0)), batch_size=8, num_workers=2)
    for step, _batch in enumerate(loader):
        if step == 19:
            break
    print(f"workers alive after the break: {len(multiprocessing.active_children())}")
