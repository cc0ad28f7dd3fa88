"""torchdata's StatefulDataLoader with 2 workers (argv[1], default 2): a DataLoader subclass with its own iterators."""

import sys

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([i * i])


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    loader = StatefulDataLoader(Squares(), batch_size=4, num_workers=workers)
    total = 0
    for _epoch in range(2):
        for batch in loader:
            total += int(batch.sum())
    print(f"state keys: {sorted(loader.state_dict())[:2]}")
    print(f"total {total}")
