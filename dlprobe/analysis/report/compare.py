"""Two runs side by side (`dlprobe compare A B`): per loader, the start method, memory per worker, time to the first
batch, throughput; per run, how it ended and the findings one has and the other has not.

Pure: built from each run's RunData and report. A value a run did not measure is None and printed as "-", never
as 0: a run whose workers died at start has no throughput, not a throughput of zero.
"""

from __future__ import annotations

import statistics
from typing import TypedDict

from dlprobe.analysis.report.schema import Report
from dlprobe.analysis.run.model import LoaderRecord, RunData


class LoaderSide(TypedDict):
    """One loader of one run."""

    start_method: str | None
    num_workers: int | None
    worker_uss_peak: int | None  # the median over its workers of each worker's peak USS (bytes)
    worker_pss_peak: int | None
    workers_read: int  # workers whose memory was read
    first_batch_s: float | None
    batches: int
    batches_per_s: float | None  # batches over the time the loop iterated it (epoch starts to last batches)
    wait_fraction: float | None


class RunSide(TypedDict):
    run_dir: str
    script: str | None
    start_method_forced: str | None
    exit_code: int | None
    duration_s: float | None
    loaders: dict[int, LoaderSide]
    findings: dict[str, str]  # code -> severity (the worst of the code's findings)


class Comparison(TypedDict):
    a: RunSide
    b: RunSide
    loader_ids: list[int]
    only_a: list[str]  # finding codes (warnings and errors) in A and not in B
    only_b: list[str]


def _median(values: list[int]) -> int | None:
    return int(statistics.median(values)) if values else None


def _rate(loader: LoaderRecord) -> float | None:
    seconds = 0.0
    for epoch in loader.epochs:
        end = epoch.t_last_batch if epoch.t_last_batch is not None else epoch.t_end
        if end is not None and epoch.batches:
            seconds += max(0.0, end - epoch.t_start)
    batches = sum(e.batches for e in loader.epochs)
    return round(batches / seconds, 3) if seconds > 0 and batches else None


def run_side(run: RunData, report: Report) -> RunSide:
    loaders: dict[int, LoaderSide] = {}
    for entry in report["loaders"]:
        lid = entry["loader_id"]
        workers = [p for p in report["processes"] if p["role"] == "worker" and p["loader_id"] == lid]
        uss = [p["uss"]["peak"] for p in workers if p["uss"]["peak"] is not None]
        pss = [p["pss"]["peak"] for p in workers if p["pss"]["peak"] is not None]
        record = run.loader(lid)
        loaders[lid] = {
            "start_method": entry.get("worker_method")
            if entry.get("worker_method") == "thread"
            else entry["start_method"],
            "num_workers": entry["num_workers"],
            "worker_uss_peak": _median([int(v) for v in uss]),
            "worker_pss_peak": _median([int(v) for v in pss]),
            "workers_read": len(uss),
            "first_batch_s": entry["first_batch_s"],
            "batches": entry["batches"],
            "batches_per_s": _rate(record) if record is not None else None,
            "wait_fraction": entry["wait_fraction"],
        }
    findings: dict[str, str] = {}
    order = ("error", "warning", "info")
    for finding in report["findings"]:
        code, severity = finding["code"], finding["severity"]
        if code not in findings or order.index(severity) < order.index(findings[code]):
            findings[code] = severity
    return {
        "run_dir": report["run_dir"],
        "script": report["script"],
        "start_method_forced": run.meta.get("start_method_forced"),
        "exit_code": report["exit_code"],
        "duration_s": report["duration_s"],
        "loaders": loaders,
        "findings": findings,
    }


def compare(a: RunSide, b: RunSide) -> Comparison:
    def problems(side: RunSide) -> set[str]:
        return {code for code, severity in side["findings"].items() if severity in ("error", "warning")}

    return {
        "a": a,
        "b": b,
        "loader_ids": sorted(set(a["loaders"]) | set(b["loaders"])),
        "only_a": sorted(problems(a) - problems(b)),
        "only_b": sorted(problems(b) - problems(a)),
    }
