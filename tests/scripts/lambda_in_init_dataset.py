"""A dataset whose transform is a lambda, read by 2 workers with the default start method: fine under fork, but
forkserver (Python 3.14's default on Linux) and spawn cannot pickle it ("Can't pickle local object")."""

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __init__(self, n):
        self.values = list(range(n))
        self.transform = lambda x: x * x

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        return torch.tensor([self.transform(self.values[i])])


if __name__ == "__main__":
    loader = DataLoader(Squares(64), batch_size=8, num_workers=2)
    print(f"total {sum(int(b.sum()) for b in loader)}")
