"""Datasets `dlprobe scan` cannot scan, chosen by argv[1]: len-fails, empty, unpicklable (spawn), empty-stream."""

import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset


class BrokenLength(Dataset):
    def __len__(self):
        raise RuntimeError("index file missing")

    def __getitem__(self, i):
        return torch.zeros(1)


class Empty(Dataset):
    def __len__(self):
        return 0

    def __getitem__(self, i):
        raise IndexError(i)


class HoldsALock(Dataset):
    def __init__(self):
        self.lock = threading.Lock()

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(1)


class EmptyStream(IterableDataset):
    def __iter__(self):
        return iter(())


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "len-fails":
        loader = DataLoader(BrokenLength(), batch_size=2)
    elif mode == "empty":
        loader = DataLoader(Empty(), batch_size=2)
    elif mode == "unpicklable":
        loader = DataLoader(HoldsALock(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    else:
        loader = DataLoader(EmptyStream(), batch_size=2)
    for _batch in loader:
        pass
