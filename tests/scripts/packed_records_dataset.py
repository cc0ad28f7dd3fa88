"""The fix for leaky_list_dataset.py: the same records in dlprobe.fixes.PackedRecords, read by 2 forked workers."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from dlprobe.fixes import PackedRecords


class RecordsDataset(Dataset):
    def __init__(self, n):
        self.records = PackedRecords([{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)])
        self.name = "records"

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        rec = self.records[i]
        return torch.tensor([len(rec["path"])]), rec["label"]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600_000
    loader = DataLoader(RecordsDataset(n), batch_size=1000, shuffle=True, num_workers=2)
    checksum = 0
    for _x, y in loader:
        checksum += int(y.sum())
        time.sleep(0.004)  # a training step, so the epoch lasts long enough to watch
    print(f"checksum {checksum}")
