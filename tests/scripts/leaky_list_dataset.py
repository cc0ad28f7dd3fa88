"""Copy-on-access: the dataset index is a list of Python dicts, read by 2 forked workers. argv: the number of records
(600,000), and the batches after which the loop stops (none: the whole epoch), for a run stopped mid-epoch."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RecordsDataset(Dataset):
    def __init__(self, n):
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]
        self.name = "records"

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        rec = self.records[i]
        return torch.tensor([len(rec["path"])]), rec["label"]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600_000
    stop = int(sys.argv[2]) if len(sys.argv) > 2 else None
    loader = DataLoader(RecordsDataset(n), batch_size=1000, shuffle=True, num_workers=2)
    checksum = 0
    for i, (_x, y) in enumerate(loader):
        checksum += int(y.sum())
        time.sleep(0.004)  # a training step, so the epoch lasts long enough to watch
        if stop is not None and i + 1 >= stop:
            break
    print(f"checksum {checksum}")
