"""torchrun, 2 ranks x 2 workers: each rank's dataset index is a list of Python dicts that its forked workers copy."""

import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RecordsDataset(Dataset):
    def __init__(self, n):
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        rec = self.records[i]
        return torch.tensor([len(rec["path"])]), rec["label"]


if __name__ == "__main__":
    dist.init_process_group("gloo")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600_000
    dataset = RecordsDataset(n)
    loader = DataLoader(dataset, batch_size=1000, num_workers=2, sampler=DistributedSampler(dataset, shuffle=True))
    total = torch.zeros(1)
    for _x, y in loader:
        total += y.sum()
        dist.all_reduce(torch.ones(1))  # the gradients' all_reduce: every step waits for every rank
        time.sleep(0.004)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} checksum {int(total.item())}", flush=True)
    dist.destroy_process_group()
