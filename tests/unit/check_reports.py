"""Synthetic report dicts for the check's unit tests (the shape dlprobe.analysis.report.build.build_report writes)."""

from __future__ import annotations

from typing import Any

MB = 1000 * 1000
MiB = 1024 * 1024


def make_report(
    *,
    worker_uss: tuple[tuple[int, int], ...] = ((10 * MiB, 20 * MiB), (10 * MiB, 30 * MiB)),
    pss_total: int | None = 500 * MiB,
    shm_peak: int | None = 4 * MiB,
    wait_fraction: float | None = 0.1,
    first_batch_s: float | None = 0.5,
    max_wait_s: float | None = 0.6,
    findings: list[dict[str, Any]] | None = None,
    exit_code: int = 0,
    schema_version: int = 1,
) -> dict[str, Any]:
    """worker_uss: (start, peak) USS of each worker."""
    workers = [
        {"pid": 100 + i, "role": "worker", "loader_id": 0, "worker_id": i, "samples": 10,
         "rss": {"start": start, "peak": peak, "end": peak}, "uss": {"start": start, "peak": peak, "end": peak},
         "pss": {"start": start, "peak": peak, "end": peak}, "swap": {"start": 0, "peak": 0, "end": 0}}
        for i, (start, peak) in enumerate(worker_uss)
    ]  # fmt: skip
    return {
        "schema_version": schema_version,
        "script": "train.py",
        "argv": [],
        "exit_code": exit_code,
        "signal": None,
        "duration_s": 4.0,
        "loaders": [
            {
                "loader_id": 0,
                "batches": 100,
                "wait_fraction": wait_fraction,
                "first_batch_s": first_batch_s,
                "max_wait_s": max_wait_s,
            }
        ],  # fmt: skip
        "processes": workers,
        "system": {"shm_total": 64 * MiB, "shm_peak": shm_peak, "pss_total_peak": pss_total},
        "findings": findings or [],
    }


def finding(code: str, severity: str = "warning", title: str = "something went wrong") -> dict[str, Any]:
    return {"code": code, "severity": severity, "title": title, "detail": "", "fix": "", "evidence": {}}
