"""A dataset holding a million dicts: the readiness copy takes a second or more to pickle it. The script times its
own iter(loader), which used to include that copy's whole life (the training waited for it); prints the time."""

import json
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, n):
        self.records = [{"id": i, "path": f"/data/{i:08d}.jpg"} for i in range(n)]

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor(self.records[i]["id"])


if __name__ == "__main__":
    loader = DataLoader(Records(1_000_000), batch_size=8, num_workers=2)
    started = time.perf_counter()
    it = iter(loader)
    iter_s = time.perf_counter() - started
    total = sum(int(batch.sum()) for batch in it)
    print(json.dumps({"iter_s": iter_s, "total": total}))
