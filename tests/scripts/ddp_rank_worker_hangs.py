"""torchrun, 2 ranks x 2 workers: on rank 1 the worker that loads index 37 blocks forever; rank 0 then waits in
the step's all_reduce."""

import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

STUCK_INDEX = 37


class Blocking(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        if i == STUCK_INDEX and os.environ.get("RANK") == "1":
            r, _w = os.pipe()
            os.read(r, 1)  # nobody ever writes: blocks forever
        return torch.tensor([float(i)])


if __name__ == "__main__":
    dist.init_process_group("gloo")
    dataset = Blocking()
    # DistributedSampler without shuffling gives rank 1 the odd indices, 37 among them
    loader = DataLoader(dataset, batch_size=4, num_workers=2, sampler=DistributedSampler(dataset, shuffle=False))
    for batch in loader:
        dist.all_reduce(batch.sum().reshape(1))
        time.sleep(0.01)
    print(f"rank {dist.get_rank()} done", flush=True)
    dist.destroy_process_group()
