"""The memory `run` keeps free per worker beyond its projection, as `tune` measures it (loader_model/reserve.py)."""

from __future__ import annotations

from dataclasses import dataclass

from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.run.model import ProcessRecord, RunData, SystemSeries
from dlprobe.loader_model.reserve import worker_reserve

RESERVE_KEYS = ("memory_reserve", "reserve_per_worker_bytes", "worker_peak_spread_bytes", "uncounted_per_worker_bytes")


@dataclass
class Reserve:
    """Bytes to keep free per worker (None: not measured; the advice keeps a flat share) and what it is made of."""

    per_worker: int | None
    peak_spread: int | None  # max - min of the workers' USS peaks; None with fewer than two workers
    uncounted: int | None  # what the cgroup charged per worker beyond its USS; None: no limit or no page cache read
    held_apart: int | None  # what the cgroup held besides the workers' USS and that charge, at the same reading

    def evidence(self) -> Evidence:
        return {
            "memory_reserve": "flat" if self.per_worker is None else "measured",
            "reserve_per_worker_bytes": self.per_worker,
            "worker_peak_spread_bytes": self.peak_spread,
            "uncounted_per_worker_bytes": self.uncounted,
        }


def measured_reserve(run: RunData, workers: list[ProcessRecord], peaks: list[int]) -> Reserve:
    """The reserve from this run's evidence: the cgroup's charge beyond the workers' USS (under a limit, where the
    page cache was read) and the spread of their USS peaks (two or more); without the charge: not measured."""
    spread = max(peaks) - min(peaks) if len(peaks) >= 2 else None
    charge = cgroup_charge(run, workers)
    uncounted, held_apart = charge if charge is not None else (None, None)
    if uncounted is None:
        # The spread alone is 0 for workers alike, which would leave no margin at all: without the cgroup's charge
        # the reserve is not measured, and the advice keeps its flat share.
        return Reserve(None, spread, None, None)
    per_worker = worker_reserve(peaks, [uncounted])  # one peak: a spread of 0
    return Reserve(per_worker, spread, uncounted, held_apart)


def cgroup_charge(run: RunData, workers: list[ProcessRecord]) -> tuple[int, int] | None:
    """(the cgroup's charge per worker beyond its USS, what it held besides the workers) at its last reading while the
    most of these workers lived, each with its USS read in that same tick, against its last reading before the first
    of them started; None where the run has no limit, no page cache read at those moments, or no such tick. Page
    cache the kernel would drop is left out (a loader reading its files fills it), and the parent's own growth
    meanwhile is the parent's."""
    system = run.system
    read = [i for i in range(len(system.t)) if _held(system, i) is not None]
    if not system.cgroup_limit or not workers or not read:
        return None
    # Alive at a reading: the sampler read it in the same tick (a worker's last memory, recorded as it exits, is not).
    ticks = [set(p.series.t) for p in workers]
    alive = {i: [p for p, seen in zip(workers, ticks, strict=True) if system.t[i] in seen] for i in read}
    most = max(len(v) for v in alive.values())
    uss = {p.pid: _uss_by_tick(run, p) for p in workers}
    during = [i for i in read if most and len(alive[i]) == most and all(system.t[i] in uss[p.pid] for p in alive[i])]
    if not during:
        return None
    after = during[-1]
    those = alive[after]
    started = min(p.series.t[0] for p in those)
    before = [i for i in read if system.t[i] < started]
    if not before:
        return None
    t0, t1 = system.t[before[-1]], system.t[after]
    workers_uss = sum(uss[p.pid][t1] for p in those)
    # The parent's own new pages, by RSS: its USS falls at the fork as its pages become shared with the workers, and
    # that moves no charge.
    grown_rss = [(_at(p, t1, "rss"), _at(p, t0, "rss")) for p in run.processes if p.role == "main"]
    parent = sum(after - before for after, before in grown_rss if after is not None and before is not None)
    grown = (_held(system, after) or 0) - (_held(system, before[-1]) or 0)
    uncounted = max(0, grown - workers_uss - parent) // len(those)
    return uncounted, (_held(system, after) or 0) - workers_uss - uncounted * len(those)


def _held(system: SystemSeries, i: int) -> int | None:
    """The cgroup's usage less the page cache the kernel drops first, at reading i; None where either is unread."""
    usage = system.cgroup_usage[i] if i < len(system.cgroup_usage) else None
    cache = system.cgroup_cache[i] if i < len(system.cgroup_cache) else None
    return None if usage is None or cache is None else usage - cache


def _uss_by_tick(run: RunData, proc: ProcessRecord) -> dict[float, int]:
    """The worker's USS by the time of the sampler's tick that read it, less its last tick before it was gone.

    Against the cgroup only a USS read in the same tick counts: one from an earlier tick misses what the worker freed
    since. A loop that breaks mid-epoch shuts its workers down, and under load a run read the cgroup 330 MiB lower
    as the first of them exited, against both workers' USS read 2 s before (362 MiB each): what it held besides them
    came out negative and 5 workers "fit" where 4 do. In a worker's last tick its exit can be under way between its
    reading and the cgroup's: that tick read both workers' RSS unchanged beside the drop."""
    read = dict(proc.series.values("uss"))
    gone = run.gone.get(proc.pid)
    seen = [t for t in run.system.t if gone is not None and t < gone]
    if seen:
        read.pop(seen[-1], None)
    return read


def _at(proc: ProcessRecord, t: float, metric: str) -> int | None:
    """The process's last reading of `metric` at or before t."""
    before = [v for at, v in proc.series.values(metric) if at <= t]
    return before[-1] if before else None
