"""Remedy 4 (dlprobe.fixes.ShardedLineStream) against reading the index into a list, on a generated line index.

One epoch of each through a DataLoader with real worker processes, both sharded by worker so that each yields
every line once; the workers' USS (Private_Clean + Private_Dirty from /proc/PID/smaps_rollup) is read every
--every batches. The list version is read into the parent before the workers fork, as most scripts do, so its
workers share the list at first and copy it page by page as reading it touches the strings' reference counts.

Usage: python benchmarks/fix_line_stream.py [--lines 10000000] [--workers 2] [--batch 1024] [--index FILE]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import machine
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dlprobe.fixes import ShardedLineStream

MiB = 2**20


class ListIndex(IterableDataset):  # type: ignore[type-arg]
    """The naive twin: every line parsed into a list in the parent, each worker yields every n-th."""

    def __init__(self, path: str) -> None:
        with open(path) as f:
            self.rows = [(p, int(label)) for p, label in (line.split() for line in f)]

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = get_worker_info()
        wid, n = (info.id, info.num_workers) if info else (0, 1)
        for i in range(wid, len(self.rows), n):
            yield self.rows[i]


def uss(pid: int) -> int:
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def make_index(path: Path, lines: int) -> None:
    if path.exists() and path.stat().st_size > 0:
        return
    with open(path, "w") as f:
        step = 100_000
        for start in range(0, lines, step):
            f.writelines(f"train/n{i % 1000:08d}/n{i % 1000:08d}_{i}.JPEG {i % 1000}\n"
                         for i in range(start, min(lines, start + step)))  # fmt: skip


def epoch(dataset, workers: int, batch: int, every: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers)
    start = time.perf_counter()
    it = iter(loader)
    pids = [w.pid for w in it._workers]  # type: ignore[attr-defined]
    first, peak, samples = None, 0, 0
    for i, (paths, _) in enumerate(it):
        samples += len(paths)
        if i % every == 0:
            now = sum(uss(p) for p in pids) / len(pids)
            first = now if first is None else first
            peak = max(peak, now)
    return {"seconds": time.perf_counter() - start, "first": first or 0, "peak": peak, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--every", type=int, default=200, help="read the workers' USS every this many batches")
    parser.add_argument("--index", help="the index file to use or make (kept); default: a temporary file")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.index) if args.index else Path(tmp) / "train.txt"
        make_index(path, args.lines)
        print(f"index: {args.lines:,} lines, {path.stat().st_size / MiB:.0f} MiB; {args.workers} workers, "
              f"batch {args.batch}")  # fmt: skip
        results = {}
        for name, make in [("ShardedLineStream", lambda: ShardedLineStream(path, seed=0)),
                           ("list of lines", lambda: ListIndex(str(path)))]:  # fmt: skip
            start = time.perf_counter()
            dataset = make()
            built = time.perf_counter() - start
            results[name] = r = epoch(dataset, args.workers, args.batch, args.every)
            assert r["samples"] == args.lines, f"{name} yielded {r['samples']:,} samples, not {args.lines:,}"
            print(f"{name:18s} build {built:5.1f} s, epoch {r['seconds']:5.1f} s; worker USS (mean of workers) at "
                  f"the first batch {r['first'] / MiB:6.0f} MiB, peak {r['peak'] / MiB:6.0f} MiB, growth "
                  f"{(r['peak'] - r['first']) / MiB:6.0f} MiB")  # fmt: skip
            del dataset
        stream, naive = results["ShardedLineStream"], results["list of lines"]
        print(f"worker peak USS: list / stream = {naive['peak'] / stream['peak']:.0f}x; "
              f"epoch time list / stream = {naive['seconds'] / stream['seconds']:.2f}")  # fmt: skip
        if args.index is None:
            os.unlink(path)


if __name__ == "__main__":
    main()
