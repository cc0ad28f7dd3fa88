"""Per-sample cost of the in-flight recorder: the same fetch with and without the recording, in-process.

Runs torch's own _MapDatasetFetcher.fetch and dlprobe's recording version on a trivial dataset (so the
recording is as large a share of the time as it can ever be) and prints nanoseconds per sample.
Target: well under a microsecond per sample, i.e. invisible next to any real __getitem__.
Usage: python benchmarks/inflight_cost.py
"""

from __future__ import annotations

import tempfile
import time

from torch.utils.data._utils import fetch

from dlprobe.in_training import inflight, worker_batches
from dlprobe.rundir.inflight_format import ROLE_WORKER, slot_path


class Trivial:
    def __getitem__(self, i: int) -> int:
        return i


def per_sample_ns(fetcher: fetch._MapDatasetFetcher, batches: int, batch_size: int) -> float:
    indices = list(range(batch_size))
    start = time.perf_counter()
    for _ in range(batches):
        fetcher.fetch(indices)
    return (time.perf_counter() - start) / (batches * batch_size) * 1e9


def main() -> None:
    batches, batch_size = 20_000, 64
    fetcher = fetch._MapDatasetFetcher(Trivial(), True, lambda data: data, False)
    plain = min(per_sample_ns(fetcher, batches, batch_size) for _ in range(3))
    with tempfile.TemporaryDirectory() as run_dir:
        inflight._slot = inflight.Slot(slot_path(run_dir, 1), ROLE_WORKER, 0, 0)
        recording = _Recording(fetcher)
        recorded = min(per_sample_ns(recording, batches, batch_size) for _ in range(3))  # type: ignore[arg-type]
        # A worker also keeps a row per batch for trace.json (sent every 0.5 s; here kept in memory only, and
        # outside torch's worker loop, so without reading the batch's number from its frame), measured on batches
        # of one sample, where the per-batch cost is the whole difference
        without = min(per_sample_ns(recording, 10 * batches, 1) for _ in range(3))  # type: ignore[arg-type]
        inflight._slot.recorder = worker_batches.WorkerBatches(0, 0)  # what a worker's fetch reads (slot.recorder)
        rows = min(per_sample_ns(recording, 10 * batches, 1) for _ in range(3))  # type: ignore[arg-type]
        inflight._slot.recorder = None
    print(f"plain fetch:     {plain:7.0f} ns/sample (trivial dataset, identity collate)")
    print(f"recording fetch: {recorded:7.0f} ns/sample  (+{recorded - plain:.0f} ns)")
    print(f"batch rows:      {rows:7.0f} ns/batch of 1 sample (+{rows - without:.0f} ns per batch)")


class _Recording:
    def __init__(self, fetcher: fetch._MapDatasetFetcher) -> None:
        self.fetcher = fetcher

    def fetch(self, indices: list[int]) -> object:
        return inflight._map_fetch(self.fetcher, indices)


if __name__ == "__main__":
    main()
