"""A dataset whose index 5 raises in a worker and whose load outside the workers blocks (a read that waits on a
server, a lock): dlprobe's check of index 5 alone runs to its limit. The script ends with the worker's ValueError,
exit code 1, under any --hang-timeout: the loop is not waiting for a batch while the probe checks the sample."""

import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class BlocksOutsideWorkers(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if get_worker_info() is None:
            time.sleep(60)  # outside a worker (dlprobe's check of the sample alone): blocks past the check's limit
        if i == 5:
            raise ValueError(f"record {i} refused by the server")
        return torch.tensor([i])


if __name__ == "__main__":
    for _batch in DataLoader(BlocksOutsideWorkers(), batch_size=2, num_workers=2):
        pass
