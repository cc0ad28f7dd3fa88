"""400 samples with a None at index 3; each process says when it has loaded 20, and samples from 60 on are slow."""

import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

# A test interrupts the scan once every worker has printed BUSY: by then each worker's first chunks (index 3
# among them) have come back, and the slow tail means the scan cannot have finished.
BUSY = "busy after 20 samples: pid"
_loaded = 0


class Slow(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        global _loaded
        _loaded += 1
        if _loaded == 20:
            # One write(2) per line: two workers' print() calls (text, then newline) can interleave on the pipe
            os.write(2, f"{BUSY} {os.getpid()}\n".encode())
        time.sleep(1.0 if i >= 60 else 0.02)
        return None if i == 3 else torch.ones(2)


if __name__ == "__main__":
    for _batch in DataLoader(Slow(), batch_size=4, num_workers=2):
        pass
