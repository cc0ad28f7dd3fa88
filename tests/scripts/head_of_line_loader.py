"""One batch in 12 holds the in-order queue: its samples each wait 40 ms on a read, the rest 0.5 ms (a few huge
images among small ones). Args: skewed|even [num_workers] [batches] [in_order]. `even` spreads the same total wait
over every batch. With 4 workers, while the loop waits on the slow batch the other workers' batches are done."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

BATCH = 8
EVERY = 12  # one batch in EVERY is slow


class Images(Dataset):
    def __init__(self, n, skewed):
        self.n, self.skewed = n, skewed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.skewed:
            time.sleep(0.04 if (i // BATCH) % EVERY == 0 else 0.0005)
        else:
            time.sleep((0.04 + (EVERY - 1) * 0.0005) / EVERY)
        return torch.full((8,), float(i))


if __name__ == "__main__":
    skewed = sys.argv[1] == "skewed"
    num_workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    batches = int(sys.argv[3]) if len(sys.argv) > 3 else 120
    in_order = sys.argv[4] != "unordered" if len(sys.argv) > 4 else True
    loader = DataLoader(Images(BATCH * batches, skewed), batch_size=BATCH, num_workers=num_workers, in_order=in_order)
    start = time.perf_counter()
    total = sum(float(x.sum()) for x in loader)
    print(f"total {total:.0f} in {time.perf_counter() - start:.2f} s")
