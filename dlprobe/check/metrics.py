"""The numbers a check gates on, read from a report dict, so a saved report.json serves as a baseline."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.report_schema import Report
from dlprobe.loader_model.worker_memory import spread
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


def worker_growths(report: Report) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(process entry, its growth) of each worker whose growth the report holds (none in reports before it)."""
    return [(dict(p), dict(g)) for p in report["processes"] if p["role"] == "worker" and (g := p.get("growth"))]


def kept_bytes(growth: dict[str, Any]) -> int:
    """A worker's steps no timed full collection ran in (no `cause`), read after its steady part began: a buffer
    kept, a batch of allocations at once. Only a collection's copy is noise (it comes at a batch that depends on
    allocation counts and load); a 50 MiB buffer a worker keeps mid-run is a regression, and setting it apart with
    the copies let every baseline rule pass it. So the baseline's steady metrics count these back in."""
    return sum(int(s["bytes"]) for s in growth.get("steps") or [] if not s.get("cause") and not s.get("held_at_start"))


def steady_values(growth: dict[str, Any]) -> tuple[float, float]:
    """A worker's (steady growth, steady peak) as a baseline compares them: a collection's copies apart, the rest in."""
    kept = kept_bytes(growth)
    return float(growth["steady_bytes"] + kept), float(growth["steady_peak_bytes"] + kept)


def largest_step(report: Report) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(worker entry, step) of the largest one-time step of any worker, or None."""
    steps = [(p, s) for p, g in worker_growths(report) for s in g.get("steps") or []]
    return max(steps, key=lambda ps: int(ps[1]["bytes"])) if steps else None


def report_spreads(report: Report) -> dict[str, float | None]:
    """Each metric's spread in this report: the standard deviation across its workers (every epoch's, every rank's);
    None where it has one value per run (the job's total) or fewer than two workers."""
    values = [steady_values(g) for _, g in worker_growths(report)]
    return {
        "worker_steady_growth": spread([growth for growth, _ in values]),
        "worker_steady_peak": spread([peak for _, peak in values]),
    }


def report_metrics(report: Report) -> dict[str, float | None]:
    """Each metric over the whole run (worst loader, worst worker); None where nothing was measured."""
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    growth = [
        peak - start
        for p in workers
        if (peak := p["uss"]["peak"]) is not None and (start := p["uss"]["start"]) is not None
    ]
    system = report["system"]
    # .get: a baseline written before the job total was recorded lacks it; the sum of peaks bounds it
    total_pss: float | None = system.get("pss_total_peak")
    if "pss_total_peak" not in system:
        peaks = [peak for p in report["processes"] if (peak := p["pss"]["peak"]) is not None]
        total_pss = sum(peaks) if peaks else None
    loaders = report["loaders"]
    growths = [g for _, g in worker_growths(report)]
    stepped = sum(int(s["bytes"]) for g in growths for s in g.get("steps") or []) - sum(map(kept_bytes, growths))
    # the job's own /dev/shm where it was read (its processes' Pss_Shmem), else the machine's (older reports)
    shm_job = system.get("shm_job_peak")
    # the job's anonymous memory, steps apart: the files' pages move with the other processes mapping them
    anon_total = system.get("pss_anon_total_peak", total_pss)
    return {
        "worker_uss_growth": _max(growth),
        "worker_steady_growth": max(steady_values(g)[0] for g in growths) if growths else None,
        "worker_uss_peak": _max([p["uss"]["peak"] for p in workers]),
        "worker_steady_peak": max(steady_values(g)[1] for g in growths) if growths else None,
        "worker_step": float(step[1]["bytes"]) if (step := largest_step(report)) else (0.0 if growths else None),
        "total_pss": total_pss,
        "total_pss_steady": max(0.0, anon_total - stepped) if growths and anon_total is not None else None,
        "shm_peak": shm_job if shm_job is not None else system["shm_peak"],
        "wait_fraction": _max([lo["wait_fraction"] for lo in loaders]),
        "first_batch_wait": _max([lo["first_batch_s"] for lo in loaders]),
        "longest_wait": _max([lo["max_wait_s"] for lo in loaders]),
    }


# The processes of a job by role, as a failure of the job's total names them (report.json's processes[].role).
ROLE_WORDS = {
    "main": ("the main process (with the pages its workers share with it)", "the main processes (with the pages "
             "their workers share with them)"),  # the job's total less the others' (_role_totals)
    "worker": ("the worker's own pages (USS)", "the {n} workers' own pages (USS)"),
}  # fmt: skip


def _role_totals(report: Report) -> dict[str, tuple[int, float]]:
    """Each role's (processes, memory at their peaks summed): where the job's memory is. A forked worker's pages it
    still shares are its parent's: a model the main process loads before the loader starts is split three ways in the
    PSS of a main process and two workers, yet it is the main's. So a worker holds its USS, any other process its
    PSS, and the main process the rest of the job's total (system.pss_total_peak, which leaves out a parent's reading
    from before it forked: the main's own PSS peak is often that one, and adding the workers' shares to it counted
    the model twice, +505 MiB for a 286 MiB one)."""
    totals: dict[str, tuple[int, float]] = {}
    for proc in report["processes"]:
        value = proc["uss"]["peak"] if proc["role"] == "worker" else proc["pss"]["peak"]
        if value is not None:
            n, had = totals.get(proc["role"], (0, 0.0))
            totals[proc["role"]] = (n + 1, had + float(value))
    job = report["system"].get("pss_total_peak")
    if "main" in totals and job is not None:
        rest = sum(v for role, (_, v) in totals.items() if role != "main")
        totals["main"] = (totals["main"][0], max(0.0, float(job) - rest))
    return totals


def where_words(report: Report, baseline: Report | None = None) -> str:
    """Where the job's memory is, the role that rose most against the baseline first (without one, the largest):
    "where: the main process ... 412.0 MiB (+286.1 MiB on the baseline's 125.9 MiB), the 2 workers' own pages ...".
    A total alone says the job grew; this says which process to look in. Empty where no process was read."""
    now, base = _role_totals(report), _role_totals(baseline) if baseline is not None else {}

    def rise(role: str) -> float:
        return now[role][1] - base[role][1] if role in base else now[role][1]

    parts = []
    for role in sorted(now, key=rise, reverse=True):
        n, total = now[role]
        one, many = ROLE_WORDS.get(role, (f"the {role} process", f"the {{n}} {role} processes"))
        words = f"{one if n == 1 else many.format(n=n)} {format_bytes(total)}"
        if role in base:
            change = total - base[role][1]
            sign = "+" if change >= 0 else "-"
            words += f" ({sign}{format_bytes(abs(change))} on the baseline's {format_bytes(base[role][1])})"
        parts.append(words)
    return f"where (PSS at each process's peak): {', '.join(parts)}" if parts else ""


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
