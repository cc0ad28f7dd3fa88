"""Workers that come and go: 2 workers started afresh for each of 3 epochs (not persistent), each epoch a few
seconds long, so a live view sees one epoch's workers exit and the next one's start."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        return torch.tensor([i * i])


if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=4, num_workers=2)
    total = 0
    for _epoch in range(3):
        for batch in loader:
            total += int(batch.sum())
            time.sleep(0.05)  # a training step: 40 of them make an epoch of 2 s or more
    print(f"total {total}")
