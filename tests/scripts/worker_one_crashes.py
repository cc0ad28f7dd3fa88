"""Samples are fine in the main process and in worker 0; worker 1 segfaults on its first sample. Each sample waits
2 ms on a read, so more workers than one would pay: tune tries two."""

import ctypes
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class CrashInSecondWorker(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        info = get_worker_info()
        if info is not None and info.id == 1:
            ctypes.string_at(0)  # a native crash, as a broken decoder would cause
        time.sleep(0.002)
        return torch.tensor([i], dtype=torch.float32)


if __name__ == "__main__":
    loader = DataLoader(CrashInSecondWorker(), batch_size=8, num_workers=0)
    print(f"batches {sum(1 for _ in loader)}")
