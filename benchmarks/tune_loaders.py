"""The loaders benchmarks/tune_regret.py tunes: `train KIND` is the user's script, `sweep KIND N,...` times counts."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

BATCH = 16
TABLE_MIB = 150  # the memory-bound kind: each worker's table, built at start
MIN_STEADY_S = 0.5  # as dlprobe/in_training/tune_trials.py: a timed window this long at least
FIELDS = 64  # the hand-over kind: small tensors per sample, so a batch is this many tensors handed over
STEP_S = {"consumer": 0.03}  # the training step per batch; the other kinds' loops do no work of their own


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds  # CPU time, so a worker queued for a core takes longer, as real work does
    while time.thread_time() < end:
        pass


class Samples(Dataset):
    """Per-sample cost by kind: CPU (spin), I/O (sleep) or both; skewed: 1 in 20 samples 20x dearer; handover: a
    dict of FIELDS small tensors, cheap to build and dear to hand over (one shared-memory file each per batch)."""

    def __init__(self, kind: str) -> None:
        self.kind, self.table = kind, None

    def __len__(self) -> int:
        return 200_000

    def __getitem__(self, i: int) -> torch.Tensor | dict[str, torch.Tensor]:
        kind = self.kind
        if kind == "handover":
            time.sleep(0.002)  # a read, as the io kind's
            return {f"f{k}": torch.full((4,), float(i)) for k in range(FIELDS)}
        if kind == "cpu":
            _spin(0.001)
        elif kind == "io" or kind == "memory":
            time.sleep(0.002)
        elif kind == "mixed":
            _spin(0.0005)
            time.sleep(0.0015)
        elif kind == "consumer":
            time.sleep(0.0005)
        elif kind == "skewed":
            time.sleep(0.02 if (i * 7919) % 20 == 0 else 0.0005)
        value = float(self.table[i % 1024]) if self.table is not None else 1.0
        return torch.full((64,), value)


class Shards(IterableDataset):
    """Two shard files split by worker (the webdataset / to_iterable_dataset way): workers past the second idle."""

    SHARDS = 2

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for shard in range(worker, self.SHARDS, workers):
            for i in range(50_000):
                time.sleep(0.002)  # a read from the shard
                yield torch.full((64,), float(shard * 50_000 + i))


def load_table(_worker_id: int) -> None:
    with open("/proc/self/oom_score_adj", "w") as f:  # the worker, not the script, is the one the kernel kills
        f.write("1000")
    dataset = get_worker_info().dataset
    dataset.table = np.ones(TABLE_MIB * 2**20 // 8)  # written, so private to the worker


def make_loader(kind: str, num_workers: int, prefetch_factor: int | None = None) -> DataLoader:
    extra: dict[str, Any] = {}
    if num_workers:
        extra = {"prefetch_factor": prefetch_factor or 2, "persistent_workers": True}
    if kind == "memory":
        extra["worker_init_fn"] = load_table
    dataset = Shards() if kind == "shards" else Samples(kind)
    return DataLoader(dataset, batch_size=BATCH, num_workers=num_workers, **extra)


def timed(
    kind: str, num_workers: int, prefetch_factor: int | None, batches: int, window_s: float = MIN_STEADY_S
) -> dict[str, Any]:
    """samples/s of a plain loop (with the kind's training step) after the first batches in flight arrived."""
    loader = make_loader(kind, num_workers, prefetch_factor)
    warm = max(2, num_workers * (prefetch_factor or 2))
    step = STEP_S.get(kind, 0.0)
    start = time.perf_counter()
    it: Any = None
    try:
        it = iter(loader)
        for _ in range(warm):
            next(it)
        t0, samples, timed = time.perf_counter(), 0, 0
        while timed < batches or time.perf_counter() - t0 < window_s:  # as a tune trial times, or longer
            samples += _samples_in(next(it))
            timed += 1
            if step:
                time.sleep(step)
        rate = samples / (time.perf_counter() - t0)
        status = "ok"
    except Exception as exc:  # noqa: BLE001 - a worker the OOM killer took: "exited unexpectedly" / "killed by
        # signal", or, once in a full sweep, torch's SIGCHLD handler raising inside iter()'s queue-thread start
        rate, status = None, f"failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"
        if it is not None and hasattr(it, "_shutdown_workers"):
            # Now, not when garbage collected: a later iterator given the same id() would find this one's worker
            # pids still registered ("_set_worker_pids should be called only once").
            it._shutdown_workers()
    finally:
        del loader
    return {"num_workers": num_workers, "prefetch_factor": prefetch_factor, "samples_per_s": rate,
            "status": status, "wall_s": round(time.perf_counter() - start, 3)}  # fmt: skip


def _samples_in(batch: torch.Tensor | dict[str, torch.Tensor]) -> int:
    return len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)


def main() -> None:
    mode, kind = sys.argv[1], sys.argv[2]
    if mode == "train":
        loader = make_loader(kind, 2)
        for step, _batch in enumerate(loader):
            time.sleep(STEP_S.get(kind, 0.0))
            if step == 200:
                break
        return
    specs = [(int(n), int(pf) if pf else None) for n, _, pf in (s.partition(":") for s in sys.argv[3].split(","))]
    window_s = float(sys.argv[4]) if len(sys.argv) > 4 else MIN_STEADY_S
    failed: dict[int, int] = {}  # num_workers -> prefetch factors that failed at it
    for num_workers, pf in specs:
        killed = [n for n, count in failed.items() if n < num_workers and count == sum(1 for m, _ in specs if m == n)]
        if killed:
            # A count that failed at every prefetch_factor (the OOM killer) fails above it too. Run on in this process,
            # a sweep of the memory loader hung past 600 s at num_workers=20 (a killed worker's queue left locked):
            # tune_regret.py runs each of these alone, in a process of its own with a time limit.
            row = {"num_workers": num_workers, "prefetch_factor": pf, "samples_per_s": None, "wall_s": 0.0,
                   "status": f"not run: num_workers={min(killed)} failed at every prefetch_factor"}  # fmt: skip
        else:
            batches = max(40, 3 * num_workers * (pf or 2))  # as many as tune times, in-flight batches excluded
            row = timed(kind, num_workers, pf, batches, window_s)
            if row["samples_per_s"] is None:
                failed[num_workers] = failed.get(num_workers, 0) + 1
        print(json.dumps(row), flush=True)
    os._exit(0)  # persistent workers of every count: no orderly wind-down to wait for


if __name__ == "__main__":
    main()
