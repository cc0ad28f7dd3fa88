"""The main process is SIGKILLed (as torchrun stops a rank) while worker 0 is blocked in __getitem__ on index 8:
that worker never checks on its parent again, so without dlprobe it would run on forever."""

import os
import signal
import threading

import torch
from torch.utils.data import DataLoader, Dataset


class Blocking(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 8:
            threading.Event().wait()  # a read that never returns
        return torch.tensor([float(i)])


if __name__ == "__main__":
    for batch in DataLoader(Blocking(), batch_size=4, num_workers=2):
        print(f"first batch {batch.flatten().tolist()}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
