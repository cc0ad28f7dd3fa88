"""torchrun, 2 ranks x 2 workers: on rank 1 loading index 37 raises; torchrun stops the job and exits 1."""

import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

BAD_INDEX = 37


class Faulty(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        if i == BAD_INDEX and os.environ.get("RANK") == "1":
            raise ValueError(f"corrupt record {i}")
        return torch.tensor([float(i)])


if __name__ == "__main__":
    dist.init_process_group("gloo")
    dataset = Faulty()
    loader = DataLoader(dataset, batch_size=4, num_workers=2, sampler=DistributedSampler(dataset, shuffle=False))
    for batch in loader:
        dist.all_reduce(batch.sum().reshape(1))
        time.sleep(0.01)
    print(f"rank {dist.get_rank()} done", flush=True)
    dist.destroy_process_group()
