"""Two loaders: a clean 16-sample validation loader iterated first, then 64 training samples with a bad record 9."""

import torch
from torch.utils.data import DataLoader, Dataset

BAD = 9


class Records(Dataset):
    def __init__(self, n, bad=None):
        self.n = n
        self.bad = bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"corrupt record {i}")
        return torch.full((4,), float(i))


if __name__ == "__main__":
    val = DataLoader(Records(16), batch_size=8, num_workers=1)
    train = DataLoader(Records(64, BAD), batch_size=8, num_workers=1)
    print(f"baseline: {sum(len(b) for b in val)} validation samples")
    print(f"trained on {sum(len(b) for b in train)} samples")
