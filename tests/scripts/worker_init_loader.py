"""Prints every batch of a map-style loader (with a worker_init_fn that reads get_worker_info and seeds numpy)
in one worker under the start method given in argv[1], and of an IterableDataset loader under fork; the output must not
change under the probe."""

import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info


def init_worker(worker_id):
    info = get_worker_info()
    assert info is not None and info.id == worker_id
    np.random.seed(1000 + info.id)


class Numbers(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor([i, info.id, int(np.random.randint(1 << 30)), int(torch.randint(1 << 30, (1,)))])


class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        for i in range(info.id, 20, info.num_workers):
            yield torch.tensor([i, info.id, int(torch.randint(1 << 30, (1,)))])


if __name__ == "__main__":
    method = sys.argv[1]
    torch.manual_seed(0)
    for name, dataset, kwargs in (
        # one spawn worker keeps the test quick: each spawned worker imports torch afresh
        ("map", Numbers(), {"worker_init_fn": init_worker, "shuffle": True, "num_workers": 1}),
        ("iterable", Stream(), {"multiprocessing_context": "fork", "num_workers": 2}),
    ):
        options = {"multiprocessing_context": method, **kwargs}
        loader = DataLoader(dataset, batch_size=4, **options)
        for batch in loader:
            print(name, batch.tolist())
        print(name, "worker_init_fn after iteration:", getattr(loader.worker_init_fn, "__name__", None))
