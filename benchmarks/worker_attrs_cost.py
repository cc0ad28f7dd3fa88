"""Cost of counting the dataset's attributes inside a worker (in_training/worker_attrs.py).

Two numbers, in-process: what every batch pays (the batch recorder's comparison with the next reading's time,
measured on batches of one trivial sample, with the counter and without it), and what one reading costs on a dataset
of ten data attributes, one of them a dict of a million entries (len() is O(1): the size does not matter), which a
worker pays about once a second at most, then less often.
Target: a few tens of nanoseconds per batch; a reading in the tens of microseconds.
Usage: python benchmarks/worker_attrs_cost.py
"""

from __future__ import annotations

import tempfile
import time
import timeit
from collections import deque

import numpy as np
from torch.utils.data import Dataset
from torch.utils.data._utils import fetch

from dlprobe.in_training import inflight, worker_attrs, worker_batches
from dlprobe.rundir.inflight_format import ROLE_WORKER, slot_path


class Trivial(Dataset):
    def __init__(self) -> None:
        self.cache = {i: i for i in range(1_000_000)}
        self.paths = [f"{i}.jpg" for i in range(1000)]
        self.labels = np.zeros(1000)
        self.order = deque(range(100))
        self.seen: set[int] = set()
        for i in range(5):
            setattr(self, f"table{i}", list(range(10)))
        self.name = "trivial"
        self.scale = 1.0

    def __getitem__(self, i: int) -> int:
        return i


def per_batch_ns(fetcher: object, batches: int) -> float:
    index = [0]
    start = time.perf_counter()
    for _ in range(batches):
        inflight._map_fetch(fetcher, index)
    return (time.perf_counter() - start) / batches * 1e9


def main() -> None:
    batches = 200_000
    dataset = Trivial()
    fetcher = fetch._MapDatasetFetcher(dataset, True, lambda data: data, False)
    with tempfile.TemporaryDirectory() as run_dir:
        inflight._slot = inflight.Slot(slot_path(run_dir, 1), ROLE_WORKER, 0, 0)
        recorder = inflight._slot.recorder = worker_batches.WorkerBatches(0, 0)
        rounds_without, rounds_with = [], []
        for _ in range(5):  # alternated, the best of each: the machine's noise hits both alike
            recorder.attrs = None
            rounds_without.append(per_batch_ns(fetcher, batches))
            counter = worker_attrs.AttrCounter(dataset, 0, 0)
            counter.due = float("inf")  # never due: the comparison alone
            recorder.attrs = counter
            rounds_with.append(per_batch_ns(fetcher, batches))
        inflight._slot.recorder = None
    without, with_counter = min(rounds_without), min(rounds_with)
    # The added lines alone (the A/B above is within a busy machine's noise): one attribute read, one comparison
    check = timeit.repeat("a = r.attrs\nif a is not None and end >= a.due: pass", number=1_000_000, repeat=5,
                          globals={"r": recorder, "end": time.time()})  # fmt: skip
    reads = 2000
    start = time.perf_counter()
    for _ in range(reads):
        worker_attrs.counts(dataset)
    reading_us = (time.perf_counter() - start) / reads * 1e6
    print(f"batch without the counter: {without:7.0f} ns/batch of 1 trivial sample")
    print(f"batch with the counter:    {with_counter:7.0f} ns/batch  (+{with_counter - without:.0f} ns)")
    print(f"the check alone:           {min(check) * 1e3:7.0f} ns/batch")
    print(f"one reading:               {reading_us:7.1f} us (10 data attributes, a dict of 1,000,000 entries)")
    # at most one reading a second: at 1,000 batches a second, a thousandth of a reading per batch
    print(f"a reading a second, at 1,000 batches/s: {reading_us:.0f} ns/batch amortised")


if __name__ == "__main__":
    main()
