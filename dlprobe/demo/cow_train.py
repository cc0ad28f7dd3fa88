"""A small training loop whose Dataset keeps its index in Python objects (or, with --fixed, in numpy arrays and
with gc.freeze() before the workers start).

Run it under `dlprobe run` to watch each worker's private memory (USS) climb while RSS stays flat.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class ListIndexDataset(Dataset[Any]):
    """The common pattern: one Python dict per sample. Every read bumps refcounts -> copy-on-write."""

    def __init__(self, n: int) -> None:
        self.samples: list[dict[str, str | int]] = [
            {"path": f"/data/shard{i % 64:02d}/img_{i:09d}.jpg", "label": i % 1000} for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        sample = self.samples[i]
        return torch.tensor([len(str(sample["path"])), i % 7], dtype=torch.float32), int(sample["label"])


class ArrayIndexDataset(Dataset[Any]):
    """The fix: the same index in numpy arrays, which hold no per-item Python objects."""

    def __init__(self, n: int) -> None:
        self.paths = np.array([f"/data/shard{i % 64:02d}/img_{i:09d}.jpg" for i in range(n)], dtype="S")
        self.labels = np.arange(n, dtype=np.int64) % 1000

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([len(self.paths[i]), i % 7], dtype=torch.float32), int(self.labels[i])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fixed", action="store_true", help="use the numpy-backed dataset")
    parser.add_argument("--samples", type=int, default=400_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--step-ms", type=float, default=8.0, help="time a training step takes (stands in for a GPU)")
    args = parser.parse_args()
    dataset = ArrayIndexDataset(args.samples) if args.fixed else ListIndexDataset(args.samples)
    loader = DataLoader(dataset, batch_size=500, shuffle=True, num_workers=args.workers)
    if args.fixed:
        # numpy alone leaves ~35 MiB of copy-on-write per worker: each worker's garbage collector writes to the
        # header of every object the parent holds (torch's modules, mostly). Frozen objects are never visited.
        gc.freeze()
    model = torch.nn.Linear(2, 1)
    total = 0.0
    for epoch in range(args.epochs):
        for x, _y in loader:
            with torch.no_grad():
                total += float(model(x).sum())
            time.sleep(args.step_ms / 1000)  # the model's step; the loop is then not waiting for data
        print(f"epoch {epoch}: {len(loader)} batches")


if __name__ == "__main__":
    main()
