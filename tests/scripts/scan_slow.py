"""400 samples of 20 ms each with a None at index 3: a scan long enough to interrupt."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.02)
        return None if i == 3 else torch.ones(2)


if __name__ == "__main__":
    for _batch in DataLoader(Slow(), batch_size=4, num_workers=2):
        pass
