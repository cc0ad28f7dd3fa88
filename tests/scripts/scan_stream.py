"""An IterableDataset of 40 samples with a None at position 7, a NaN at 12 and a wrong shape at 20."""

import torch
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        for position in range(40):
            if position == 7:
                yield None
                continue
            sample = torch.ones(4) * position
            if position == 12:
                sample[0] = float("nan")
            if position == 20:
                sample = torch.ones(5)
            yield sample


if __name__ == "__main__":
    for _batch in DataLoader(Stream(), batch_size=4):
        pass
