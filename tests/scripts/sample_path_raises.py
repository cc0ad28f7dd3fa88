"""A dataset whose sample path comes from argv: the worker raises FileNotFoundError naming it on index 5."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class PathDataset(Dataset):
    def __init__(self, root: str) -> None:
        self.root = root

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            raise FileNotFoundError(f"no such sample: {self.root}/{index}.jpg")
        return torch.tensor(index)


if __name__ == "__main__":
    for batch in DataLoader(PathDataset(sys.argv[1]), batch_size=4, num_workers=1):
        print(batch.tolist())
