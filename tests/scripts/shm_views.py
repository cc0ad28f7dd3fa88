"""Each sample is a slice (a view) of a larger decoded chunk: `chunk[start:start + 50_000]` of 1,000,000 floats, so
the sample's own bytes are 200 KB and its storage's 4 MB. The collate_fn keeps the samples as they are (a list, as a
variable-length batch's often does), so sending a batch from a worker moves each view's WHOLE storage into /dev/shm:
20x the batch's own bytes. Under a small /dev/shm the workers' queues cannot share the batches, drop them, and the
loop waits (DataLoader(timeout=8) ends it). `clone` returns `.clone()` of the slice: the batches fit.
"""

import sys

import torch
from torch.utils.data import DataLoader, Dataset

CHUNK = 1_000_000  # floats a decoded chunk holds (4 MB)
SLICE = 50_000  # floats a sample keeps of it (200 KB)


class ChunkSlices(Dataset):
    def __init__(self, clone):
        self.clone = clone

    def __len__(self):
        return 64

    def __getitem__(self, i):
        chunk = torch.arange(CHUNK, dtype=torch.float32) + i  # "decoding" one chunk
        start = (i * SLICE) % (CHUNK - SLICE)
        sample = chunk[start : start + SLICE]
        return sample.clone() if self.clone else sample


def keep_samples(samples):
    return list(samples)


if __name__ == "__main__":
    loader = DataLoader(
        ChunkSlices("clone" in sys.argv[1:]), batch_size=4, num_workers=2, collate_fn=keep_samples, timeout=8
    )
    total = 0.0
    for batch in loader:
        total += sum(float(t[0]) for t in batch)
    print(f"total {total}")
