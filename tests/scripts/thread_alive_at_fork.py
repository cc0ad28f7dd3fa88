"""A background 'heartbeat' thread that takes a lock is running when the DataLoader forks its 2 workers."""

import threading
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

LOCK = threading.Lock()


def heartbeat():
    while True:
        with LOCK:
            time.sleep(0.01)
        time.sleep(0.01)


if __name__ == "__main__":
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=2)
    print(f"batches {sum(1 for _ in loader)}")
