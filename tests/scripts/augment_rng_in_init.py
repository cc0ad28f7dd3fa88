"""A dataset that makes its augmentation's random generator in `__init__` and draws from it in `__getitem__`, read
by 4 workers for 2 epochs (workers restart each epoch): every worker, every epoch, starts the generator at the same
state and draws the same noise. `numpy` (default): `np.random.default_rng(0)`; `random`: `random.Random(0)`; `torch`:
a `torch.Generator`. `seeded`: the fixed twin, re-seeded per worker in worker_init_fn from get_worker_info().seed.
`unused`: the generator is never drawn from in the workers. Prints the distinct augmentations among the draws.
"""

import random
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

N = 256


class Augmented(Dataset):
    def __init__(self, kind, use=True):
        self.kind, self.use = kind, use
        if kind == "random":
            self.rng = random.Random(0)
        elif kind == "torch":
            self.rng = torch.Generator().manual_seed(0)
        else:
            self.rng = np.random.default_rng(0)

    def __len__(self):
        return N

    def noise(self):
        if not self.use:
            return 0.0
        if self.kind == "random":
            return self.rng.random()
        if self.kind == "torch":
            return float(torch.rand((), generator=self.rng))
        return float(self.rng.random())

    def __getitem__(self, i):
        return torch.tensor([float(i), self.noise()])


def reseed(worker_id):
    info = get_worker_info()
    ds = info.dataset
    if ds.kind == "random":
        ds.rng = random.Random(info.seed)
    elif ds.kind == "torch":
        ds.rng = torch.Generator().manual_seed(info.seed)
    else:
        ds.rng = np.random.default_rng(info.seed)


def main():
    args = sys.argv[1:]
    kind = next((a for a in args if a in ("numpy", "random", "torch")), "numpy")
    ds = Augmented(kind, use="unused" not in args)
    loader = DataLoader(ds, batch_size=16, num_workers=4, worker_init_fn=reseed if "seeded" in args else None)
    draws = []
    for _epoch in range(2):
        for batch in loader:
            draws.extend(batch[:, 1].tolist())
    print(f"{len(set(draws))} distinct augmentations among {len(draws)} draws")


if __name__ == "__main__":
    main()
