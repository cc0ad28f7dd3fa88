"""Small summaries of recorded series: start/peak/end of a metric, and a loader's waiting time."""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any

from dlprobe.analysis.run.model import ROLE_CHECK, LoaderRecord, ProcessRecord, Series


def metric_summary(series: Series, metric: str) -> dict[str, int | None]:
    values = [v for _, v in series.values(metric)]
    if not values:
        return {"start": None, "peak": None, "end": None}
    return {"start": values[0], "peak": max(values), "end": values[-1]}


def growth(series: Series, metric: str) -> int:
    """Peak minus first reading: how much a process gained while it lived (0 with fewer than 2 readings)."""
    values = [v for _, v in series.values(metric)]
    if len(values) < 2:
        return 0
    return max(values) - values[0]


def wait_summary(loader: LoaderRecord) -> dict[str, Any]:
    """Batches, time spent waiting for them (including starting the iterator) and its share of the loop."""
    batches = sum(e.batches for e in loader.epochs)
    wait = sum(e.wait_s + e.iter_s for e in loader.epochs)
    span = 0.0
    for e in loader.epochs:
        end = e.t_end or e.t_last_batch
        if end is not None:
            span += max(0.0, end - e.t_start)
    first = [e.waits[0] + e.iter_s for e in loader.epochs if e.waits]
    waits = sorted(loader.waits)
    return {
        "epochs": len(loader.epochs),
        "batches": batches,
        "wait_s": round(wait, 4),
        "wait_fraction": round(min(1.0, wait / span), 4) if span > 0 else None,
        "first_batch_s": round(first[0], 4) if first else None,
        "median_wait_s": round(waits[len(waits) // 2], 6) if waits else None,
        "p95_wait_s": round(waits[int(len(waits) * 0.95)], 6) if waits else None,
        "max_wait_s": round(max(max(e.longest_wait_s, e.iter_s) for e in loader.epochs), 6) if loader.epochs else None,
    }


def job_pss_peak(processes: list[ProcessRecord], metric: str = "pss") -> int | None:
    """Peak of the whole job's PSS over time, over the sums that can be made (`job_pss_summable`): the peaks of
    processes need not coincide, so the sum of their peaks would overstate it, one round's readings alone would
    understate it, and a parent's reading from before it forked counts the pages it now shares twice (the fixed demo's
    job read 214.8 MiB in one run and 289.6 MiB in the next, which failed a baseline it had written itself). None
    where no sum can be made."""
    return max(job_pss_summable(processes, metric)[1], default=None)


def job_pss_summable(processes: list[ProcessRecord], metric: str = "pss") -> tuple[list[float], list[int]]:
    """The job's PSS over time, only where its readings can be summed: each process counts with its last reading
    (tree_total), but a parent's reading taken before a child of its started (its workers, a copy of itself) still
    holds the pages they now share in full, so a sum with the child's reading counts them twice: those points are
    left out, never taken for memory the job held. Only a parent's stale reading does this: a still process read
    every 30 s beside workers restarted every epoch leaves the sums in, and so does a child that began its own
    program (a torchrun rank beside its agent: they share no heap; the agent, read rarely, left a CI run's node
    total below one rank's own peak). dlprobe's own forks of the training process are not summed (job_processes)."""
    processes = job_processes(processes)
    tracked = [(p, r) for p in processes if (r := p.series.values(metric))]
    times, totals = tree_total(processes, metric)
    kept_t, kept = [], []
    for t, total in zip(times, totals, strict=True):
        counted = [(p, r) for p, r in tracked if r[0][0] <= t <= r[-1][0]]
        # each counted process's latest reading at or before t
        latest = {p.pid: r[bisect_right(r, (t, math.inf)) - 1][0] for p, r in counted}
        if any(p.ppid in latest and r[0][0] > latest[p.ppid] and not p.own_program for p, r in counted):
            continue
        kept_t.append(t)
        kept.append(total)
    return kept_t, kept


def job_processes(processes: list[ProcessRecord]) -> list[ProcessRecord]:
    """The processes whose memory is the job's: all but dlprobe's own forks of the training process (ROLE_CHECK: the
    start-method readiness copy, the sample check, in_training/quiet_fork.py), which are dlprobe's cost. A readiness
    copy read once for 84 MiB (pickling turns the pages it touches private) put the job's total at 302 MiB where it
    held 265 before and after, and failed a check's total_pss gate on an unchanged loader."""
    return [p for p in processes if p.role != ROLE_CHECK]


def tree_total(processes: list[ProcessRecord], metric: str) -> tuple[list[float], list[int]]:
    """The sum of a metric over the job's processes (job_processes) at every reading time. PSS is read for a few
    processes per round (it is costly), so each process counts with its last reading from its first to its last:
    summing only the readings of one round would show a saw-tooth far below the truth."""
    series = [r for r in (p.series.values(metric) for p in job_processes(processes)) if r]
    times = sorted({t for readings in series for t, _ in readings})
    totals = []
    positions = [0] * len(series)
    for t in times:
        total = 0
        for i, readings in enumerate(series):
            if not readings[0][0] <= t <= readings[-1][0]:
                continue
            while positions[i] + 1 < len(readings) and readings[positions[i] + 1][0] <= t:
                positions[i] += 1
            total += readings[positions[i]][1]
        totals.append(total)
    return times, totals
