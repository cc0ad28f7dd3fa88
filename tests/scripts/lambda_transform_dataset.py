"""A dataset holding a lambda made inside main(): fine under fork (nothing is pickled), refused by pickle under spawn
and forkserver ("Can't pickle local object 'main.<locals>.<lambda>'")."""

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __init__(self, transform):
        self.transform = transform

    def __len__(self):
        return 32

    def __getitem__(self, i):
        return self.transform(torch.tensor(float(i)))


def main():
    loader = DataLoader(Squares(lambda x: x * x), batch_size=8, num_workers=1)
    print("total", sum(float(b.sum()) for b in loader))


if __name__ == "__main__":
    main()
