"""A sampler with an off-by-one: once per epoch it yields len(dataset), which the list-backed dataset cannot index.
The dataset is right; the sampler is at fault (its class, the index and the length are what the report must name)."""

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class Rows(Dataset):
    def __init__(self):
        self.rows = [torch.tensor([i]) for i in range(40)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class OneTooFar(Sampler):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(range(1, self.n + 1))  # meant range(self.n)


if __name__ == "__main__":
    data = Rows()
    for _batch in DataLoader(data, batch_size=8, sampler=OneTooFar(len(data)), num_workers=2):
        pass
