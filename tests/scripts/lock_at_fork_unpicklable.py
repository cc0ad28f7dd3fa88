"""A thread holds a lock as the workers fork (worker 0 hangs on index 13 taking it), and the dataset holds a lambda
with the loop outside a `__main__` guard (forkserver and spawn would not start its workers): two findings whose
fixes, alone, point opposite ways."""

import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

LOCK = threading.Lock()


def hold() -> None:
    while True:
        with LOCK:
            time.sleep(0.5)


class Doubled(Dataset):
    def __init__(self) -> None:
        self.transform = lambda x: x * 2

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 13:
            with LOCK:
                pass
        return self.transform(torch.tensor(float(i)))


threading.Thread(target=hold, daemon=True).start()
time.sleep(0.1)
for _batch in DataLoader(Doubled(), batch_size=2, num_workers=2):
    time.sleep(0.05)
