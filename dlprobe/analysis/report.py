"""The report: one JSON-ready model built from a run and its findings; every output renders from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlprobe import __version__
from dlprobe.analysis import analyze
from dlprobe.analysis.model import PAGE_KINDS, Finding, RunData, load_run
from dlprobe.analysis.stats import job_pss_peak, metric_summary, wait_summary

SCHEMA_VERSION = 1


def _loader_entry(run: RunData, lo: Any) -> dict[str, Any]:
    cfg = lo.config
    ds = lo.dataset
    return {
        "loader_id": lo.loader_id,
        "dataset_type": ds.get("type"),
        "dataset_len": ds.get("len"),
        "iterable": ds.get("iterable"),
        "batch_size": cfg.get("batch_size"),
        "num_workers": lo.num_workers,
        "start_method": lo.start_method,
        "pin_memory": cfg.get("pin_memory"),
        "prefetch_factor": cfg.get("prefetch_factor"),
        "persistent_workers": cfg.get("persistent_workers"),
        "timeout": cfg.get("timeout"),
        "batch_bytes": (lo.batch_info or {}).get("bytes"),
        "batch_leaves": (lo.batch_info or {}).get("leaves"),
        "dataset_est_bytes": ds.get("est_bytes"),
        "suspects": ds.get("suspects") or [],
        "workers": [
            {"worker_id": p.worker_id, "pid": p.pid}
            for p in sorted(run.workers(lo.loader_id), key=lambda p: (p.worker_id or 0, p.pid))
        ],
        "errors": lo.errors,
        **wait_summary(lo),
    }


def _process_entry(proc: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pid": proc.pid,
        "role": proc.role,
        "loader_id": proc.loader_id,
        "worker_id": proc.worker_id,
        "comm": proc.comm,
        "samples": len(proc.series.t),
    }
    for metric in ("rss", "uss", "pss", "swap", *PAGE_KINDS):
        entry[metric] = metric_summary(proc.series, metric)
    return entry


def build_report(run: RunData, findings: list[Finding]) -> dict[str, Any]:
    meta, result, system = run.meta, run.result, run.system
    ended = result.get("ended_at")
    shm_used = [u for u in system.shm_used if u is not None]
    available = [a for a in system.available if a is not None]
    cg_usage = [u for u in system.cgroup_usage if u is not None]
    return {
        "schema_version": SCHEMA_VERSION,
        "dlprobe_version": meta.get("dlprobe_version", __version__),
        "run_dir": str(run.path),
        "script": meta.get("script"),
        "argv": meta.get("argv", []),
        "exit_code": result.get("exit_code"),
        "signal": result.get("signal"),
        "duration_s": round(ended - meta["started_at"], 3) if ended and meta.get("started_at") else None,
        "machine": meta.get("machine", {}),
        "loaders": [_loader_entry(run, lo) for lo in run.loaders],
        "processes": [_process_entry(p) for p in sorted(run.processes, key=_process_order)],
        "system": {
            "shm_total": system.shm_total,
            "shm_peak": max(shm_used) if shm_used else None,
            "available_min": min(available) if available else None,
            "cgroup_limit": system.cgroup_limit,
            "cgroup_peak": max(cg_usage) if cg_usage else None,
            "pss_total_peak": job_pss_peak(run.processes),
        },
        "findings": [f.to_dict() for f in findings],
    }


def _process_order(proc: Any) -> tuple[int, int, int, int]:
    rank = {"main": 0, "worker": 1}.get(proc.role, 2)
    return (rank, proc.loader_id or 0, proc.worker_id or 0, proc.pid)


def report_for(path: Path) -> tuple[RunData, dict[str, Any]]:
    """Load a run directory, analyze it and build its report."""
    run = load_run(path)
    return run, build_report(run, analyze(run))
