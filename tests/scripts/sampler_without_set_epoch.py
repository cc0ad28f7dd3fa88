"""A DistributedSampler(shuffle=True) read for 3 epochs without `sampler.set_epoch(epoch)`: the same order every
epoch (num_replicas and rank are given, so no process group is needed). `set-epoch`: the fixed twin calls it each
epoch. `random-sampler`: a plain shuffle=True loader (RandomSampler), which reshuffles every epoch by itself.
`sequential`: shuffle=False, the same order by design. Prints how many distinct orders the epochs had."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

N = 512


class Numbers(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "no-set-epoch"
    ds = Numbers()
    sampler = None
    if mode in ("no-set-epoch", "set-epoch"):
        sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
        loader = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=2)
    else:
        loader = DataLoader(ds, batch_size=32, shuffle=mode == "random-sampler", num_workers=2)
    orders = set()
    for epoch in range(3):
        if mode == "set-epoch":
            sampler.set_epoch(epoch)
        order = []
        for batch in loader:
            order.extend(int(x) for x in batch[:, 0])
        orders.add(tuple(order))
    print(f"{len(orders)} distinct orders in 3 epochs")


if __name__ == "__main__":
    main()
