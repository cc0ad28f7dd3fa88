"""A loader whose 2 workers are threads of the training process (worker_method="thread"), 2 epochs; with `hang`,
worker 1 blocks forever on its sample 37, so the loop waits for a batch that never comes.

Where the installed torch has thread workers (its DataLoader takes worker_method), that is what runs; elsewhere the
stand-in in thread_worker_loader.py does (see there for what it fakes).
"""

import inspect
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

HANG = "hang" in sys.argv[1:]


class SquaresDataset(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        if HANG and i == 37:
            threading.Event().wait()  # a read that never returns
        x = torch.arange(64, dtype=torch.float32) * i
        for _ in range(20):  # some work in the worker thread, for its CPU time
            x = torch.sin(x) + 1.0
        return x, i % 10


if __name__ == "__main__":
    dataset = SquaresDataset()
    if "worker_method" in inspect.signature(DataLoader).parameters:
        loader = DataLoader(dataset, batch_size=8, num_workers=2, worker_method="thread")
    else:
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        from thread_worker_loader import ThreadWorkerLoader

        loader = ThreadWorkerLoader(dataset, batch_size=8, num_workers=2)
    total = 0
    for _epoch in range(2):
        for _x, y in loader:
            total += int(y.sum())
            time.sleep(0.005)
    print(f"total {total}")
