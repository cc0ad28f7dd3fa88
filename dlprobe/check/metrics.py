"""The numbers a check gates on, read from a report dict, so a saved report.json serves as a baseline."""

from __future__ import annotations

from typing import Any

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


def _max(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def report_metrics(report: dict[str, Any]) -> dict[str, float | None]:
    """Each metric over the whole run (worst loader, worst worker); None where nothing was measured."""
    workers = [p for p in report.get("processes", []) if p.get("role") == "worker"]
    growth = [
        p["uss"]["peak"] - p["uss"]["start"]
        for p in workers
        if p["uss"].get("peak") is not None and p["uss"].get("start") is not None
    ]
    system = report.get("system") or {}
    total_pss = system.get("pss_total_peak")
    if total_pss is None:  # reports written before the job total was recorded: the sum of peaks bounds it
        peaks = [p["pss"]["peak"] for p in report.get("processes", []) if p["pss"].get("peak") is not None]
        total_pss = sum(peaks) if peaks else None
    loaders = report.get("loaders", [])
    return {
        "worker_uss_growth": _max(growth),
        "worker_uss_peak": _max([p["uss"].get("peak") for p in workers]),
        "total_pss": total_pss,
        "shm_peak": system.get("shm_peak"),
        "wait_fraction": _max([lo.get("wait_fraction") for lo in loaders]),
        "first_batch_wait": _max([lo.get("first_batch_s") for lo in loaders]),
        "longest_wait": _max([lo.get("max_wait_s") for lo in loaders]),
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
