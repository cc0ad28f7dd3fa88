"""The memory to keep free per worker beyond its projection, measured, for `tune` and `run`."""

from __future__ import annotations


def worker_reserve(peaks: list[int], uncounted: list[int]) -> int:
    """Bytes per worker from what was measured: how far a worker's private peak varied (tune: between its trials; run:
    between the workers of the run), and the most the cgroup charged per worker beyond its private memory (page
    tables, kernel stacks, /dev/shm in flight: not in USS, still counted against the limit)."""
    spread = max(peaks) - min(peaks) if peaks else 0
    return spread + max(uncounted, default=0)
