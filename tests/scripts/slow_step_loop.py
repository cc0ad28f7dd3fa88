"""A training loop whose own step (30 ms a batch) is slower than its loader (cheap samples): the loop bounds the job.

Args: MODE [num_workers]. MODE: `train` runs 2 epochs and prints TRAINED; `stops-early` takes 6 batches, breaks and
ends (prints STOPPED); `two-loaders` takes 2 batches of a check loader (as Lightning's sanity check does), then trains
on a second loader and prints TRAINED; `swallows` catches every exception around its first epoch (SystemExit too),
then trains and prints TRAINED; `raises` raises ValueError in its fourth step.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

STEP_S = 0.03


class Cheap(Dataset):
    def __len__(self):
        return 16 * 400

    def __getitem__(self, i):
        time.sleep(0.0005)  # a quick read
        return torch.full((8,), float(i))


def train(loader, epochs=2):
    for _ in range(epochs):
        for _batch in loader:
            time.sleep(STEP_S)  # the model's step: an accelerator busy, the host waiting


if __name__ == "__main__":
    mode = sys.argv[1]
    num_workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    loader = DataLoader(Cheap(), batch_size=16, num_workers=num_workers)
    if mode == "stops-early":
        for step, _batch in enumerate(loader):
            time.sleep(STEP_S)
            if step == 5:
                break
        print("STOPPED", flush=True)
    elif mode == "swallows":
        try:
            train(loader, epochs=1)
        except BaseException:  # noqa: S110 - a catch-all around the loop, as some training frameworks write
            pass
        train(loader)
        print("TRAINED", flush=True)
    elif mode == "raises":
        for step, _batch in enumerate(loader):
            time.sleep(STEP_S)
            if step == 3:
                raise ValueError("loss is nan")
    elif mode == "two-loaders":
        check = DataLoader(Cheap(), batch_size=16, num_workers=num_workers)
        for step, _batch in enumerate(check):
            if step == 1:
                break
        train(loader)
        print("TRAINED", flush=True)
    else:
        train(loader)
        print("TRAINED", flush=True)
