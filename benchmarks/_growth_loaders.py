"""Loaders whose workers' memory grows in known ways, one epoch each, for benchmarks/projection_accuracy.py.

Usage: python benchmarks/_growth_loaders.py SHAPE [N] [STEP_S]
  list-of-dicts  a list of N dicts read by 2 forked workers: copy-on-write that bends as pages run out
  dict           a dict of N int -> dict records (COCO-style annotations): the same, through a dict
  cache          an unbounded cache each worker fills with every sample it decodes: new memory, straight
  load-at-start  each worker loads a 64 MiB table in worker_init_fn, then nothing grows
  healthy        numpy features: nothing grows
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

BATCH = 250


class Records(Dataset):
    def __init__(self, shape: str, n: int) -> None:
        self.shape, self.n = shape, n
        if shape == "list-of-dicts":
            self.records: object = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]
        elif shape == "dict":
            self.records = {i: {"file": f"/data/{i:09d}.jpg", "bbox": [i % 7, i % 11, 32, 32]} for i in range(n)}
        elif shape == "healthy":
            self.records = np.random.default_rng(0).standard_normal((n, 16)).astype(np.float32)
        self.cache: dict[int, bytes] = {}
        self.table: np.ndarray | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.shape == "list-of-dicts":
            return len(self.records[i]["path"]), self.records[i]["label"]  # type: ignore[index]
        if self.shape == "dict":
            rec = self.records[i]  # type: ignore[index]
            return len(rec["file"]), rec["bbox"][0]
        if self.shape == "cache":
            if i not in self.cache:
                self.cache[i] = bytes(1024) + i.to_bytes(8, "little")  # the "decoded" sample, kept forever
            return len(self.cache[i]), i % 10
        if self.shape == "load-at-start":
            return float(self.table[i % len(self.table), 0]), i % 10  # type: ignore[index]
        return float(self.records[i, 0]), i % 10  # type: ignore[index]


def load_table(_worker_id: int) -> None:
    dataset = get_worker_info().dataset
    if dataset.shape == "load-at-start":
        dataset.table = np.ones((2048, 8192), dtype=np.float32)  # 64 MiB of its own


if __name__ == "__main__":
    shape = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    step_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.02
    loader = DataLoader(Records(shape, n), batch_size=BATCH, shuffle=True, num_workers=2, worker_init_fn=load_table)
    total = 0
    for _x, y in loader:
        total += int(torch.as_tensor(y).sum())
        time.sleep(step_s)  # a training step: the epoch lasts N / BATCH steps
    print(f"total {total}")
