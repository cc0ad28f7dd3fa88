"""The loop at the script's top level, with no `if __name__ == "__main__":` guard: fine under fork; a forkserver or
spawn worker imports the script again, reaches the loop and fails in "the bootstrapping phase"."""

import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([i])


loader = DataLoader(Numbers(), batch_size=8, num_workers=2)
print(f"total {sum(int(b.sum()) for b in loader)}")
