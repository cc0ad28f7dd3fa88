"""The numbers a check gates on, read from a report dict, so a saved report.json serves as a baseline."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.report.schema import Report
from dlprobe.loader_model.worker_memory import FULL_COLLECTION, spread
from dlprobe.units import format_bytes

# metric -> how its values are shown
METRIC_KINDS = {
    "worker_uss_growth": "bytes",
    "worker_steady_growth": "bytes",
    "worker_uss_peak": "bytes",
    "worker_steady_peak": "bytes",
    "worker_step": "bytes",
    "total_pss": "bytes",
    "total_pss_steady": "bytes",
    "shm_peak": "bytes",
    "wait_fraction": "share",
    "first_batch_wait": "seconds",
    "longest_wait": "seconds",
}


def _max(values: list[int | None] | list[float | None] | list[int]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


# A baseline compares these metrics with their one-time steps apart, where both reports have the workers' growth
# (report.json's processes[].growth): one full garbage collection in one worker of one run is not a regression.
STEADY_OF = {
    "worker_uss_growth": "worker_steady_growth",
    "worker_uss_peak": "worker_steady_peak",
    "total_pss": "total_pss_steady",  # the job's anonymous memory (Pss_Anon summed), steps apart
}
# The per-worker field whose spread across the workers is each metric's noise.
SPREAD_FIELDS = {"worker_steady_growth": "steady_bytes", "worker_steady_peak": "steady_peak_bytes"}


def worker_growths(report: Report) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(process entry, its growth) of each worker whose growth the report holds (none in reports before it)."""
    return [(dict(p), dict(g)) for p in report["processes"] if p["role"] == "worker" and (g := p.get("growth"))]


def largest_step(report: Report) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(worker entry, step) of the largest one-time step of any worker, or None."""
    steps = [(p, s) for p, g in worker_growths(report) for s in g.get("steps") or []]
    return max(steps, key=lambda ps: int(ps[1]["bytes"])) if steps else None


def report_spreads(report: Report) -> dict[str, float | None]:
    """Each metric's spread in this report: the standard deviation across its workers (every epoch's, every rank's);
    None where it has one value per run (the job's total) or fewer than two workers."""
    growths = [g for _, g in worker_growths(report)]
    return {
        metric: spread([float(g[key]) for g in growths if g.get(key) is not None])
        for metric, key in SPREAD_FIELDS.items()
    }


def _total_pss(report: Report) -> float | None:
    system = report["system"]
    if "pss_total_peak" in system:
        return system["pss_total_peak"]
    # a baseline written before the job total was recorded lacks it; the sum of peaks bounds it
    peaks = [peak for p in report["processes"] if (peak := p["pss"]["peak"]) is not None]
    return sum(peaks) if peaks else None


def legacy_total_steady(report: Report) -> float | None:
    """The job's anonymous memory at its peak less every worker's steps, wherever they fell: what reports before
    pss_anon_total_steady_peak compared, and what a run is compared by against such a baseline (the sum by sum value
    is never below this one: the two differ by the steps that fell after the peak)."""
    total = report["system"].get("pss_anon_total_peak", _total_pss(report))
    growths = [g for _, g in worker_growths(report)]
    if not growths or total is None:
        return None
    return max(0.0, total - sum(int(s["bytes"]) for g in growths for s in g.get("steps") or []))


# The steady metrics a copy no reading showed leaves in: a worker's peak and the job's total (its growth is read from
# its first reading after the first batch on, so the copy is in its start either way).
PEAKS_WITH_UNSEEN_COPY = ("worker_steady_peak", "total_pss_steady")


def unseen_copy(report: Report) -> str:
    """Words naming a worker whose full collection ran before its first reading (its copy is in every reading, its
    size in none), or "" where there is none."""
    for proc, growth in worker_growths(report):
        if growth.get("collected_before_first_reading"):
            return f"worker {proc.get('worker_id')}'s full collection ran before its first reading"
    return ""


def copy_estimate(*reports: Report) -> int | None:
    """What a copy no reading showed whole is taken to be: the largest full collection's step any worker of these
    reports (the same loader's runs) was read taking whole (none held at its start); None where none was."""
    steps = [int(s["bytes"]) for r in reports for _, g in worker_growths(r) for s in g.get("steps") or []
             if s.get("cause") == FULL_COLLECTION and not s.get("held_at_start")]  # fmt: skip
    return max(steps) if steps else None


def without_unseen_copies(report: Report, metrics: dict[str, float | None], copy: int) -> dict[str, float | None]:
    """`metrics` with what no reading showed of a copy of `copy` bytes taken out of each worker whose collection began
    before its first reading (the copy less the steps it was read taking: 19 of a 36 MiB copy was a step where the
    first reading came mid-collection): from its steady peak, and from the job's steady total."""
    growths = worker_growths(report)
    unseen = [max(0, copy - sum(int(s["bytes"]) for s in g.get("steps") or []))
              if g.get("collected_before_first_reading") else 0 for _, g in growths]  # fmt: skip
    if not any(unseen):
        return metrics
    peaks = [max(0, int(g["steady_peak_bytes"]) - left) for (_, g), left in zip(growths, unseen, strict=True)]
    total = metrics.get("total_pss_steady")
    return {
        **metrics,
        "worker_steady_peak": float(max(peaks)),
        "total_pss_steady": None if total is None else max(0.0, total - sum(unseen)),
    }


def has_steady_total(report: Report) -> bool:
    """Whether the report holds the job's steady total sum by sum (worker_steps.job_steady_peak)."""
    return report["system"].get("pss_anon_total_steady_peak") is not None


def report_metrics(report: Report) -> dict[str, float | None]:
    """Each metric over the whole run (worst loader, worst worker); None where nothing was measured."""
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    growth = [
        peak - start
        for p in workers
        if (peak := p["uss"]["peak"]) is not None and (start := p["uss"]["start"]) is not None
    ]
    system = report["system"]
    loaders = report["loaders"]
    growths = [g for _, g in worker_growths(report)]
    # the job's own /dev/shm where it was read (its processes' Pss_Shmem), else the machine's (older reports)
    shm_job = system.get("shm_job_peak")
    # the job's anonymous memory, steps apart: the files' pages move with the other processes mapping them
    steady_total = system.get("pss_anon_total_steady_peak") if growths else None
    return {
        "worker_uss_growth": _max(growth),
        "worker_steady_growth": _max([g["steady_bytes"] for g in growths]) if growths else None,
        "worker_uss_peak": _max([p["uss"]["peak"] for p in workers]),
        "worker_steady_peak": _max([g["steady_peak_bytes"] for g in growths]) if growths else None,
        "worker_step": float(step[1]["bytes"]) if (step := largest_step(report)) else (0.0 if growths else None),
        "total_pss": _total_pss(report),
        "total_pss_steady": steady_total if steady_total is not None else legacy_total_steady(report),
        "shm_peak": shm_job if shm_job is not None else system["shm_peak"],
        "wait_fraction": _max([lo["wait_fraction"] for lo in loaders]),
        "first_batch_wait": _max([lo["first_batch_s"] for lo in loaders]),
        "longest_wait": _max([lo["max_wait_s"] for lo in loaders]),
    }


def format_metric(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    kind = METRIC_KINDS.get(metric)
    if kind == "bytes":
        return format_bytes(value)
    if kind == "share":
        return f"{100 * value:.1f}%"
    if kind == "seconds":
        return f"{value:.2f}s"
    return f"{value:g}"
