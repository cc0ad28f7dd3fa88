"""A training loop that keeps every batch it receives (`kept.append(batch)`: a "history" it never reads back) under
torch's default `file_descriptor` sharing strategy: each tensor a worker sends reaches the main process as a
/dev/shm storage that holds one open descriptor while it lives, so the main process's count climbs by two a batch
(the sample tensor and the index tensor) until `RuntimeError: Too many open files. Communication with the workers is
no longer possible`. The dataset opens nothing. The script lowers its own RLIMIT_NOFILE to 256 so the limit is
reached in seconds. `clone` keeps `.clone()`s of the batch instead (plain memory, no descriptor): no climb.
"""

import resource
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SquaresDataset(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.005)  # a decode; also lets the supervisor read the climb a few times before the limit
        return torch.full((16,), float(i * i)), i


if __name__ == "__main__":
    clone = "clone" in sys.argv[1:]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    loader = DataLoader(SquaresDataset(), batch_size=8, num_workers=2)
    kept = []
    total = 0.0
    for step, (x, index) in enumerate(loader):
        total += float(x.sum())
        kept.append((x.clone(), index.clone()) if clone else (x, index))
        if step >= 300:
            break
    print(f"kept {len(kept)} batches, total {total}")
