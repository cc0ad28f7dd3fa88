"""Synthetic runs for unit tests of the pure analysis code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlprobe.analysis.model import Epoch, LoaderRecord, ProcessRecord, RunData, Series, SystemSeries

MiB = 1024 * 1024


def series(uss: list[int], rss: list[int], t0: float = 100.0) -> Series:
    n = len(uss)
    return Series(t=[t0 + i for i in range(n)], rss=list(rss), uss=list(uss), pss=list(uss), swap=[0] * n)


def loader(
    loader_id: int = 0,
    num_workers: int = 2,
    start_method: str | None = "fork",
    suspects: list[dict[str, Any]] | None = None,
    est_bytes: int = 0,
    batch_bytes: int | None = None,
    prefetch_factor: int | None = 2,
    epochs: list[Epoch] | None = None,
) -> LoaderRecord:
    config = {
        "num_workers": num_workers,
        "prefetch_factor": prefetch_factor,
        "batch_size": 8,
        "dataset": {"type": "x.DS", "len": 100, "suspects": suspects or [], "est_bytes": est_bytes},
    }
    record = LoaderRecord(loader_id, config, 100.0, start_method, epochs or [])
    if batch_bytes is not None:
        record.batch_info = {"bytes": batch_bytes, "leaves": []}
    return record


def worker(pid: int, worker_id: int, s: Series, loader_id: int = 0) -> ProcessRecord:
    return ProcessRecord(pid, "worker", loader_id, worker_id, "pt_data_worker", 1, s)


def run(
    loaders: list[LoaderRecord],
    processes: list[ProcessRecord],
    system: SystemSeries | None = None,
    events: list[dict[str, Any]] | None = None,
    mem_total: int = 24 * 1024 * MiB,
) -> RunData:
    meta = {"script": "train.py", "argv": [], "started_at": 100.0, "machine": {"mem_total": mem_total}}
    result = {"exit_code": 0, "ended_at": 110.0}
    return RunData(Path("/nonexistent"), meta, result, loaders, processes, system or SystemSeries(), events or [])
