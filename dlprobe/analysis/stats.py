"""Small summaries of recorded series: start/peak/end of a metric, and a loader's waiting time."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.model import LoaderRecord, ProcessRecord, Series


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
    wait = sum(sum(e.waits) + e.iter_s for e in loader.epochs)
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
        "max_wait_s": round(max([*waits, *(e.iter_s for e in loader.epochs)]), 6) if loader.epochs else None,
    }


def job_pss_peak(processes: list[ProcessRecord]) -> int | None:
    """Peak of the whole job's PSS: the largest sum over one sampling round (the peaks of processes need not
    coincide, so the sum of their peaks would overstate it)."""
    rounds: dict[float, int] = {}
    for proc in processes:
        for t, v in proc.series.values("pss"):
            rounds[t] = rounds.get(t, 0) + v
    return max(rounds.values()) if rounds else None
