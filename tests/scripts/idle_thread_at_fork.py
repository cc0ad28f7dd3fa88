"""A monitor thread parked in Event.wait (what tqdm's TMonitor does) is alive when the DataLoader forks its workers."""

import threading

import torch
from torch.utils.data import DataLoader, TensorDataset

STOP = threading.Event()


def monitor():
    while not STOP.wait(10.0):
        pass


if __name__ == "__main__":
    threading.Thread(target=monitor, name="monitor", daemon=True).start()
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=2)
    print(f"batches {sum(1 for _ in loader)}")
    STOP.set()
