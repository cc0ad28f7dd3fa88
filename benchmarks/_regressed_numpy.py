"""The healthy numpy loader of tests/scripts/numpy_dataset.py with one regression added, for check_noise.py.

argv: the case, and the batches the run is sized for (the config's max_batches, else the epoch's 600):
- job300: the main process allocates 300 MB before the loop (a model or a cache kept on the host); the workers
  inherit it, so the job's total PSS holds it once.
- worker50: each worker allocates 50 MiB gradually, a slice per batch, over its share of the run's batches.
- worker50-step: each worker allocates 50 MiB at once, at its share's middle batch (a buffer kept).
Every allocation is written (np.ones), so its pages are the process's own, not the kernel's shared zero page.
"""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

MiB = 1 << 20
BATCH = 1000
WORKERS = 2


class RegressedDataset(Dataset):
    def __init__(self, n, case, batches):
        self.paths = np.array([f"/data/img_{i:09d}.jpg" for i in range(n)], dtype="S")
        self.labels = np.arange(n, dtype=np.int64) % 100
        self.case = case
        self.per_worker = max(1, batches // WORKERS)  # the batches each worker makes in the run
        self.kept = []  # the regression: what a worker allocates and keeps
        self.calls = 0

    def __len__(self):
        return len(self.paths)

    def _regress(self, batch):
        if self.case == "worker50" and batch < self.per_worker:
            self.kept.append(np.ones(50 * MiB // self.per_worker, dtype=np.uint8))
        elif self.case == "worker50-step" and batch == self.per_worker // 2:
            self.kept.append(np.ones(50 * MiB, dtype=np.uint8))

    def __getitem__(self, i):
        if get_worker_info() is not None:
            if self.calls % BATCH == 0:
                self._regress(self.calls // BATCH)
            self.calls += 1
        return torch.tensor([len(self.paths[i])]), int(self.labels[i])


if __name__ == "__main__":
    case = sys.argv[1]
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    if case not in ("job300", "worker50", "worker50-step"):
        raise SystemExit(f"unknown case {case!r}")
    held = np.ones(300 * 1000 * 1000, dtype=np.uint8) if case == "job300" else None
    loader = DataLoader(RegressedDataset(600_000, case, batches), batch_size=BATCH, shuffle=True, num_workers=WORKERS)
    checksum = 0
    for _x, y in loader:
        checksum += int(y.sum())
        time.sleep(0.004)
    print(f"checksum {checksum}" + (f", {held.nbytes:,} bytes held" if held is not None else ""))
