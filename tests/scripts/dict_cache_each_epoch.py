"""A cache each worker fills for itself (a user's report): `__getitem__` keeps every decoded sample in `self.cache`,
a dict on the dataset, so each of 2 forked workers fills its own copy (~96 MiB of new memory per worker and epoch)
and, the workers not being persistent, takes it with it at each of the 3 epochs' end: the next epoch's workers decode
every sample again. `filled-first`: the fixed twin, the cache filled in the parent before the DataLoader is built,
so the workers only read it (a reference count per sample: one page each, not the sample). `module-cache`: the same
growth in a dict of the module's, not the dataset's (as a C library's own buffers would be): no attribute grows.
`persistent`: persistent_workers=True, each worker keeping its own cache across the epochs (up to all 768)."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLES = 768
SAMPLE_BYTES = 256 * 1024


def decode(i):
    return bytes([i % 251]) * SAMPLE_BYTES  # the "decoded image": every page written


_MODULE_CACHE = {}


class CachedDecode(Dataset):
    def __init__(self, module_cache=False):
        if not module_cache:
            self.cache = {}

    def __len__(self):
        return SAMPLES

    def fill(self):
        for i in range(SAMPLES):
            self.cache[i] = decode(i)

    def __getitem__(self, i):
        cache = getattr(self, "cache", _MODULE_CACHE)
        if i not in cache:
            cache[i] = decode(i)
        sample = cache[i]
        return torch.tensor([sample[0], len(sample)]), i % 10


if __name__ == "__main__":
    dataset = CachedDecode(module_cache=sys.argv[1:] == ["module-cache"])
    if sys.argv[1:] == ["filled-first"]:
        dataset.fill()
    persistent = sys.argv[1:] == ["persistent"]
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, persistent_workers=persistent)
    checksum = 0
    for _epoch in range(3):
        for x, y in loader:
            checksum += int(x[:, 0].sum()) + int(y.sum())
            time.sleep(0.05)  # a training step
    print(f"checksum {checksum}")
