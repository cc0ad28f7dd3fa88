"""The training process holds many small Python objects the workers never read (a metadata table of tuples); each
worker's first full garbage collection writes to all their headers, copying their pages. Args: [collect_at]
[freeze]: the worker collects at its collect_at-th batch (its automatic collections off, so the moment is the
script's, not the allocator's); `freeze` calls gc.freeze() before the loop starts the workers."""

import gc
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

BATCH = 100


class Labels(Dataset):
    def __init__(self, n, collect_at):
        self.labels = np.arange(n, dtype=np.int64) % 10
        self.collect_at = collect_at
        self.fetched = 0

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        self.fetched += 1
        if self.fetched == self.collect_at * BATCH:
            gc.collect()
        time.sleep(0.0002)
        return torch.tensor(int(self.labels[i]))


def quiet_collector(_worker_id):
    gc.disable()
    assert get_worker_info() is not None


if __name__ == "__main__":
    collect_at = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    metadata = {i: (i, f"sample-{i}", float(i)) for i in range(400_000)}  # the workers never read it
    loader = DataLoader(Labels(60_000, collect_at), batch_size=BATCH, num_workers=2, worker_init_fn=quiet_collector)
    if "freeze" in sys.argv[2:]:
        gc.freeze()
    total = sum(int(y.sum()) for y in loader)
    print(f"total {total} over {len(metadata)} records")
