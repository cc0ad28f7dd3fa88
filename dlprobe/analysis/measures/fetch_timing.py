"""Where the workers' batch-building time goes, from their own clocks: fetch or collate, on a CPU, queued or blocked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.measures.loop_timing import steady_window
from dlprobe.analysis.measures.timed_batches import timed_batches
from dlprobe.analysis.measures.worker_cpu import MIN_FETCH_ROWS
from dlprobe.analysis.run.model import LoaderRecord, RunData

# Rows with the worker's clocks (fetch and collate CPU time, queued time: timed_batches.TimedBatch.clocks) are split;
# runs written before these clocks have the first five fields only, and get no split.


@dataclass
class FetchTiming:
    """Seconds summed over the batches the workers timed in the loop's steady windows (a row kept at stride k
    counts k times); `queued_s` is None where a worker could not read its schedstat."""

    batches: int
    fetch_s: float
    collate_s: float
    fetch_cpu_s: float
    collate_cpu_s: float
    queued_s: float | None

    @property
    def total_s(self) -> float:
        return self.fetch_s + self.collate_s

    def _queued(self, wall: float, cpu: float) -> float:
        """The part's share of the run-queue wait, split by the time each part spent off a CPU (only the sum over
        the batch is read, to keep the clock reads per batch few)."""
        off = max(0.0, self.fetch_s - self.fetch_cpu_s) + max(0.0, self.collate_s - self.collate_cpu_s)
        if not self.queued_s or off <= 0:
            return 0.0
        return min(self.queued_s, off) * max(0.0, wall - cpu) / off

    def split(self) -> dict[str, float]:
        """Shares of the batch-building time: fetch and collate, each on a CPU, queued for one, or blocked."""
        total = self.total_s or 1.0
        out: dict[str, float] = {}
        for part, wall, cpu in (("fetch", self.fetch_s, self.fetch_cpu_s), ("collate", self.collate_s,
                                                                           self.collate_cpu_s)):  # fmt: skip
            cpu = min(cpu, wall)
            queued = self._queued(wall, cpu)
            out[f"{part}_share"] = round(wall / total, 3)
            out[f"{part}_cpu_share"] = round(cpu / total, 3)
            out[f"{part}_queued_share"] = round(queued / total, 3)
            out[f"{part}_blocked_share"] = round(max(0.0, wall - cpu - queued) / total, 3)
        return out

    @property
    def cpu_share(self) -> float:
        return min(self.total_s, self.fetch_cpu_s + self.collate_cpu_s) / (self.total_s or 1.0)

    @property
    def blocked_share(self) -> float:
        """Neither on a CPU nor waiting for one: a read, a sleep, a lock, the network."""
        s = self.split()
        return s["fetch_blocked_share"] + s["collate_blocked_share"]

    def describe(self) -> str:
        """The split in words, e.g. 'fetch 97% (on a CPU 90%, queued 5%, blocked 2%), collate 3%'."""
        s = self.split()

        def part(name: str) -> str:
            inner = f"on a CPU {100 * s[f'{name}_cpu_share']:.0f}%"
            if self.queued_s is not None:
                inner += f", queued {100 * s[f'{name}_queued_share']:.0f}%"
            inner += f", blocked {100 * s[f'{name}_blocked_share']:.0f}%"
            return f"{name} {100 * s[f'{name}_share']:.0f}% ({inner})"

        return f"{part('fetch')}, {part('collate')}"

    def evidence(self) -> dict[str, Any]:
        return {"timed_batches": self.batches, "timed_s": round(self.total_s, 3), **self.split()}


def fetch_timing(run: RunData, loader: LoaderRecord) -> FetchTiming | None:
    """The workers' own split of their batch time over the loop's steady windows, or None where fewer than
    MIN_FETCH_ROWS rows carry the clocks (an older run, num_workers=0: the loop's fetches are its waits)."""
    windows = [w for w in (steady_window(e) for e in loader.epochs) if w is not None]
    sums = [0.0] * 5
    batches = 0
    queued_known = True
    for row in timed_batches(run, loader.loader_id):
        if row.clocks is None or not any(lo <= row.start <= hi for lo, hi in windows):
            continue  # rows written before the clocks; start-up batches (the first of each epoch) are not steady cost
        fetch_cpu, collate_cpu, queued = row.clocks
        batches += row.stride
        queued_known = queued_known and queued >= 0
        for i, value in enumerate((row.fetch_s, row.collate_s, fetch_cpu, collate_cpu, max(0.0, queued))):
            sums[i] += row.stride * max(0.0, value)
    if batches < MIN_FETCH_ROWS:
        return None
    return FetchTiming(batches, sums[0], sums[1], sums[2], sums[3], sums[4] if queued_known else None)
