"""Records read by 2 spawn workers: a plain list (argv[1] == "list") or PackedRecords shared through /dev/shm."""

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from dlprobe.fixes import PackedRecords


class RecordsDataset(Dataset):
    def __init__(self, n, mode):
        records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]
        self.records = records if mode == "list" else PackedRecords(records, share="spawn-records-v1")

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return torch.tensor([self.records[i]["label"]])


def maps_cache(_worker_id):
    """Each worker says whether it maps the cached file (shared pages) rather than holding a copy."""
    maps = Path("/proc/self/maps").read_text()
    print(f"worker maps cache: {'spawn-records-v1.npy' in maps}", flush=True)


if __name__ == "__main__":
    mode, n = sys.argv[1], int(sys.argv[2])
    loader = DataLoader(RecordsDataset(n, mode), batch_size=5000, num_workers=2, multiprocessing_context="spawn",
                        worker_init_fn=maps_cache)  # fmt: skip
    total = sum(int(b.sum()) for b in loader)
    print(f"total {total}")
