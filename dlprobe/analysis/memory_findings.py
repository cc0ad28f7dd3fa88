"""Worker memory findings: copy-on-access growth under fork, and full dataset copies under spawn."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.model import Finding, LoaderRecord, RunData
from dlprobe.analysis.stats import growth, metric_summary
from dlprobe.units import format_bytes

MiB = 1024 * 1024
COW_MIN_GROWTH = 64 * MiB  # per-worker USS growth worth a finding; worker start-up noise stays far below
COW_RSS_SHARE = 0.5  # RSS growing less than half as fast as USS means pages went shared -> private
SPAWN_COPY_MIN = 64 * MiB

COW_FIXES = (
    "Keep the data out of Python objects so reading it touches no reference counts: "
    "numpy arrays of fixed-width bytes or numbers (np.array(paths, dtype='S')), a pyarrow table, "
    "one serialized buffer plus offsets, or torch tensors."
)


def _worker_growth(run: RunData, loader: LoaderRecord) -> list[dict[str, Any]]:
    rows = []
    for proc in sorted(run.workers(loader.loader_id), key=lambda p: p.worker_id or 0):
        uss = metric_summary(proc.series, "uss")
        rss = metric_summary(proc.series, "rss")
        rows.append(
            {
                "pid": proc.pid,
                "worker_id": proc.worker_id,
                "uss_start_bytes": uss["start"],
                "uss_peak_bytes": uss["peak"],
                "uss_growth_bytes": growth(proc.series, "uss"),
                "pss_growth_bytes": growth(proc.series, "pss"),
                "rss_growth_bytes": growth(proc.series, "rss"),
                "rss_peak_bytes": rss["peak"],
            }
        )
    return rows


def _fix_for(suspects: list[dict[str, Any]]) -> str:
    if not suspects:
        return COW_FIXES
    top = suspects[0]
    return (
        f"`{top['attribute']}` is a {top['type']} with {top['items']:,} items "
        f"(~{format_bytes(top['est_bytes'])} of Python objects); every worker that reads it copies the pages. "
        + COW_FIXES
    )


def find_cow_growth(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        if loader.num_workers == 0 or loader.start_method not in ("fork", None):
            continue
        rows = _worker_growth(run, loader)
        grown = [r for r in rows if r["uss_growth_bytes"] >= COW_MIN_GROWTH]
        if not grown:
            continue
        copy_on_access = [r for r in grown if r["rss_growth_bytes"] < COW_RSS_SHARE * r["uss_growth_bytes"]]
        suspects = loader.dataset.get("suspects") or []
        worst = max(grown, key=lambda r: r["uss_growth_bytes"])
        evidence = {
            "workers": rows,
            "suspects": suspects,
            "start_method": loader.start_method or "fork",
            "num_workers": loader.num_workers,
            "projected_per_worker_bytes": sum(s["est_bytes"] for s in suspects) or None,
        }
        limit = run.system.cgroup_limit or run.meta.get("machine", {}).get("mem_total")
        total_uss = sum(r["uss_peak_bytes"] or 0 for r in rows)
        severity = "error" if limit and total_uss > 0.5 * limit else "warning"
        if copy_on_access:
            title = (
                f"{len(grown)} of {len(rows)} workers of loader {loader.loader_id} each copied up to "
                f"{format_bytes(worst['uss_growth_bytes'])} of the dataset into private memory (USS) "
                "while RSS stayed flat"
            )
            detail = (
                "Forked workers share the dataset's pages with the main process until they touch them. Reading a "
                "Python object changes its reference count, so the kernel copies every page the worker reads: USS "
                "and PSS climb each epoch while RSS does not move, and with enough workers the job is OOM-killed "
                "('DataLoader worker (pid N) is killed by signal: Killed.')."
            )
            fix = _fix_for(suspects)
        else:
            title = (
                f"Workers of loader {loader.loader_id} keep allocating: up to "
                f"{format_bytes(worst['uss_growth_bytes'])} more private memory each, and RSS grew with it"
            )
            detail = (
                "RSS grew along with USS, so the growth is new allocations inside the workers (a cache, a list that "
                "grows per sample, decoded data kept alive) rather than shared pages being copied."
            )
            fix = (
                "Look for state that grows in __getitem__ (caches without a bound, appended lists) and bound or "
                "remove it; " + _fix_for(suspects)
            )
        findings.append(Finding("cow-growth", severity, title, detail, fix, evidence, loader.loader_id))
    return findings


def find_spawn_copy(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        if loader.num_workers == 0 or loader.start_method not in ("spawn", "forkserver"):
            continue
        dataset_bytes = int(loader.dataset.get("est_bytes") or 0)
        if dataset_bytes < SPAWN_COPY_MIN:
            continue
        rows = _worker_growth(run, loader)
        total = dataset_bytes * loader.num_workers
        findings.append(
            Finding(
                code="spawn-copy",
                severity="warning",
                title=(
                    f"Each of the {loader.num_workers} {loader.start_method} workers of loader {loader.loader_id} "
                    f"starts with its own pickled copy of a ~{format_bytes(dataset_bytes)} dataset"
                ),
                detail=(
                    f"With the '{loader.start_method}' start method the dataset object is pickled and rebuilt in "
                    f"every worker, so ~{format_bytes(total)} is spent on copies (and start-up waits for the "
                    "pickling) every time workers start."
                ),
                fix=(
                    "Keep the dataset object small and load data lazily inside the worker: store file paths or "
                    "offsets, open files in worker_init_fn or on first __getitem__, and memory-map large arrays "
                    "(np.load(path, mmap_mode='r')) so workers share the page cache. On Linux, "
                    "multiprocessing_context='fork' shares the parent's memory instead of copying it. Use "
                    "persistent_workers=True so the copy is made once, not every epoch."
                ),
                evidence={
                    "start_method": loader.start_method,
                    "num_workers": loader.num_workers,
                    "dataset_est_bytes": dataset_bytes,
                    "total_copied_bytes": total,
                    "workers": rows,
                    "largest_attributes": loader.dataset.get("suspects") or [],
                },
                loader_id=loader.loader_id,
            )
        )
    return findings
