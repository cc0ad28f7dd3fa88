"""The numbers a check gates on, read from a report dict, so a saved report.json serves as a baseline."""

from __future__ import annotations

from dlprobe.analysis.report_schema import Report
from dlprobe.units import format_bytes

# metric -> how its values are shown
METRIC_KINDS = {
    "worker_uss_growth": "bytes",
    "worker_uss_peak": "bytes",
    "total_pss": "bytes",
    "shm_peak": "bytes",
    "wait_fraction": "share",
    "first_batch_wait": "seconds",
    "longest_wait": "seconds",
}


def _max(values: list[int | None] | list[float | None] | list[int]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


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
    return {
        "worker_uss_growth": _max(growth),
        "worker_uss_peak": _max([p["uss"]["peak"] for p in workers]),
        "total_pss": total_pss,
        "shm_peak": system["shm_peak"],
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
