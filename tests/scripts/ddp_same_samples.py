"""torchrun, 2 ranks x 2 workers without a DistributedSampler: every rank reads the whole dataset."""

import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


if __name__ == "__main__":
    dist.init_process_group("gloo")
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, shuffle=False)
    for batch in loader:
        dist.all_reduce(batch.sum().reshape(1))
        time.sleep(0.002)
    print(f"rank {dist.get_rank()} done", flush=True)
    dist.destroy_process_group()
