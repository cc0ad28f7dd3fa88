"""A 10-sample dataset with a custom batch_sampler (pairs in reverse order) and a custom collate_fn."""

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class Tiny(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.full((4,), float(i))


class ReversePairs(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        order = list(range(self.n))[::-1]
        return iter([order[i : i + 2] for i in range(0, self.n, 2)])

    def __len__(self):
        return (self.n + 1) // 2


def stack_and_count(samples):
    return {"x": torch.stack(samples), "n": len(samples)}


if __name__ == "__main__":
    loader = DataLoader(Tiny(), batch_sampler=ReversePairs(10), collate_fn=stack_and_count, num_workers=0)
    print(f"batches {sum(1 for _ in loader)}")
