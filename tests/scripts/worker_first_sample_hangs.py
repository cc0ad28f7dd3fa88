"""Every worker's first sample never returns (in effect a lock held across fork); the script's own loop has no
workers. `dlprobe tune` must give a hung trial up at its batch timeout, not at the end of its budget."""

import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class HangsInWorkers(Dataset):
    def __len__(self) -> int:
        return 4000

    def __getitem__(self, i: int) -> torch.Tensor:
        if get_worker_info() is not None:
            time.sleep(3600)
        return torch.tensor([i])


if __name__ == "__main__":
    for _batch in DataLoader(HangsInWorkers(), batch_size=16, num_workers=0):
        pass
