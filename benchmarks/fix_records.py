"""Remedy 1: forked workers' private memory growth over one epoch, a list of dicts vs PackedRecords and a dict of
records (COCO-style annotations, {key: [path, label, weight]}) vs PackedMapping, in one run.

Private memory (Private_Clean + Private_Dirty from /proc/PID/smaps_rollup) of each worker after its first batch
and at the end of the epoch; the growth is what copy-on-write cost. Same records, same loader, same process.
Usage: python benchmarks/fix_records.py [--records 1500000] [--workers 2] [--shape list|dict|both]
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import torch
from _common import machine
from torch.utils.data import DataLoader, Dataset

from dlprobe.fixes import PackedMapping, PackedRecords

MiB = 1024 * 1024


class Records(Dataset):
    def __init__(self, records: Any) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> torch.Tensor:
        rec = self.records[i]
        return torch.tensor([rec["label"] + len(rec["path"])])


class Annotations(Dataset):
    """Looks each sample up by its key, made from the index so that no shared list of keys is read."""

    def __init__(self, annotations: Any) -> None:
        self.annotations = annotations

    def __len__(self) -> int:
        return len(self.annotations)

    def __getitem__(self, i: int) -> torch.Tensor:
        path, label, _weight = self.annotations[f"img_{i:09d}"]
        return torch.tensor([label + len(path)])


def private_bytes(pid: int) -> int:
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Private_Clean:", "Private_Dirty:"):
                values[parts[0]] = int(parts[1]) * 1024
    return sum(values.values())


def epoch(dataset: Dataset, workers: int) -> tuple[list[int], float, int]:
    """(per-worker private growth over the epoch, seconds, checksum)."""
    loader = DataLoader(dataset, batch_size=1000, shuffle=True, num_workers=workers, persistent_workers=True)
    it = iter(loader)
    start = time.perf_counter()
    total = int(next(it).sum())
    pids = [w.pid for w in it._workers]  # type: ignore[attr-defined]  # private, fine for a benchmark
    before = [private_bytes(p) for p in pids]
    for batch in it:
        total += int(batch.sum())
    after = [private_bytes(p) for p in pids]
    seconds = time.perf_counter() - start
    del it, loader
    return [a - b for a, b in zip(after, before, strict=True)], seconds, total


def compare(name: str, plain: Dataset, packed: Dataset, workers: int) -> None:
    """One epoch over each, the Python objects first (then dropped), with the same samples from both."""
    grown, secs, plain_sum = epoch(plain, workers)
    print(f"{name[0]:<14}: worker private growth {', '.join(f'{g / MiB:.1f}' for g in grown)} MiB; epoch {secs:.1f} s")
    del plain
    gc.collect()
    grown_p, secs_p, packed_sum = epoch(packed, workers)
    print(f"{name[1]:<14}: worker private growth {', '.join(f'{g / MiB:.1f}' for g in grown_p)} MiB; "
          f"epoch {secs_p:.1f} s")  # fmt: skip
    assert packed_sum == plain_sum, "the two datasets returned different samples"
    ratio = max(grown) / max(max(grown_p), 1)
    print(f"largest worker growth: {name[0]} {max(grown) / MiB:.1f} MiB vs {name[1]} {max(grown_p) / MiB:.1f} MiB "
          f"({ratio:.0f}x less); epoch time packed/plain {secs_p / secs:.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shape", choices=("list", "dict", "both"), default="both")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.shape in ("list", "both"):
        records = [{"path": f"/data/train/img_{i:09d}.jpg", "label": i % 1000} for i in range(args.records)]
        t = time.perf_counter()
        packed = PackedRecords(records)
        pack_s = time.perf_counter() - t
        print(f"{args.records:,} dict records; PackedRecords: {packed.nbytes / MiB:.1f} MiB buffer, packed in "
              f"{pack_s:.1f} s")  # fmt: skip
        compare(("list of dicts", "PackedRecords"), Records(records), Records(packed), args.workers)
        del records, packed
        gc.collect()
    if args.shape in ("dict", "both"):
        annotations = {f"img_{i:09d}": [f"/data/train/img_{i:09d}.jpg", i % 1000, 1.0] for i in range(args.records)}
        t = time.perf_counter()
        mapping = PackedMapping(annotations)
        pack_s = time.perf_counter() - t
        print(f"{args.records:,} keyed records; PackedMapping: {mapping.nbytes / MiB:.1f} MiB buffer, packed in "
              f"{pack_s:.1f} s")  # fmt: skip
        compare(("dict of lists", "PackedMapping"), Annotations(annotations), Annotations(mapping), args.workers)


if __name__ == "__main__":
    main()
