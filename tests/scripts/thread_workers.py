"""A loader whose 2 workers are threads of the training process (worker_method="thread"), 2 epochs; with `hang`,
worker 1 blocks forever on its sample 37, so the loop waits for a batch that never comes.

Where the installed torch has thread workers (its DataLoader takes worker_method), that is what runs; elsewhere the
stand-in in thread_worker_loader.py does (see there for what it fakes).
"""

import inspect
import json
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

HANG = "hang" in sys.argv[1:]
SEEN = {}  # what each worker thread says of itself: native id -> [samples, its own CPU seconds so far]


class SquaresDataset(Dataset):
    def __len__(self):
        return 640

    def __getitem__(self, i):
        if HANG and i == 37:
            threading.Event().wait()  # a read that never returns
        mine = SEEN.setdefault(threading.get_native_id(), [0, 0.0])
        x = torch.arange(64, dtype=torch.float32) * i
        for _ in range(150):  # some work in the worker thread (a second or so per epoch), for its CPU time
            x = torch.sin(x) + 1.0
        mine[0] += 1
        mine[1] = time.thread_time()
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
    print("threads " + json.dumps(SEEN))
