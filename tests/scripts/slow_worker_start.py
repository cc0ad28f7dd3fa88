"""A loader whose every spawn/forkserver worker takes seconds more to start than the training process did: a worker
that imports the script again (as `__mp_main__`) sleeps at its top level, as a script's slow top-level work would.
argv: the start method, and the seconds each worker's start sleeps."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

if __name__ == "__mp_main__":  # a worker (or the fork server, where it preloads `__main__`) running the script again
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 12.0)


class Small(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i)])


if __name__ == "__main__":
    loader = DataLoader(Small(), batch_size=8, num_workers=2, multiprocessing_context=sys.argv[1])
    print("total", sum(float(b.sum()) for b in loader))
