"""How many workers of a loader fit the memory left for them: each worker's USS projected to the end of its epoch
(cow-growth's projection), the budget the cgroup or the host leaves, and the reserve a worker needs besides. One
answer for `run`'s advice, `attach`'s growth and `tune`'s trials (loader_model/worker_memory.py)."""

from __future__ import annotations

from typing import Any, cast

from dlprobe.analysis.evidence.rows import WorkerRow
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.stats import metric_summary
from dlprobe.analysis.measures.worker_growth import first_batch_built, load_done_at, loader_worker_end
from dlprobe.analysis.measures.worker_reserve import Reserve, measured_reserve
from dlprobe.analysis.run.model import LoaderRecord, ProcessRecord, RunData
from dlprobe.loader_model.worker_memory import Growth, memory_for_workers, steady_growth, workers_that_fit


def projected_worker_bytes(run: RunData, loader: LoaderRecord) -> tuple[int, int, list[dict[str, Any]]] | None:
    """(largest per-worker USS projected to the end of the epoch, largest measured, rows) or None without readings.
    A worker's projection is cow-growth's (worker_growth.loader_worker_end: what it held at start, then its copies
    and new allocations, each bent toward its ceiling), so no worker is projected past what it could copy."""
    rows: list[dict[str, Any]] = []
    projected = 0
    for proc in run.workers(loader.loader_id):
        end = loader_worker_end(run, loader, proc)
        if end is None:
            continue
        end_bytes, peak, model = end
        grown = worker_steady_growth(run, loader.loader_id, proc)
        rows.append({"worker_id": proc.worker_id, "pid": proc.pid, "uss_peak_bytes": peak,
                     "uss_growth_bytes": grown.bytes if grown else 0, "projection": model.evidence()})  # fmt: skip
        projected = max(projected, end_bytes)
    if not rows:
        return None
    peak = int(max(r["uss_peak_bytes"] for r in rows))
    return int(projected), peak, rows


def worker_steady_growth(run: RunData, loader_id: int, proc: ProcessRecord) -> Growth | None:
    """A worker's USS growth that goes on with the batches (loader_model/worker_memory.py): from its first batch built
    (worker_init_fn and a lazy load in the first sample are over by then) or from when a load at start was done,
    whichever is later. That load is paid once, not per batch: extended over an epoch it projects memory that cannot
    be. From its first reading where neither is known."""
    marks = [t for t in (first_batch_built(run, loader_id, proc.pid), load_done_at(proc.series)) if t]
    return steady_growth(proc.series.values("uss"), max(marks, default=float("-inf")))


def _memory_for_workers(run: RunData, measured_workers: int, reserve: Reserve) -> int | None:
    """Memory the workers may take (loader_model/worker_memory.py): the cgroup limit less what it held besides them
    (measured with the reserve) or less the parent's private memory, and what the host had available with the
    workers' memory added back, the tighter."""
    held_apart = reserve.held_apart
    if held_apart is None:
        main = next((p for p in run.processes if p.role == "main"), None)
        held_apart = (metric_summary(main.series, "uss")["peak"] if main else None) or 0
    available = [a for a in run.system.available if a is not None]
    limit = run.system.cgroup_limit
    return memory_for_workers(limit, held_apart, min(available) if available else None, measured_workers)


def workers_fit_memory(run: RunData, loader: LoaderRecord) -> tuple[int | None, Evidence]:
    """How many workers of this loader fit the memory left for them (None without readings), and the evidence: the
    worker memory figure and the budget `run`'s advice and `attach`'s growth both give (loader_model/worker_memory.py,
    as `tune`'s trials)."""
    memory = projected_worker_bytes(run, loader)
    if memory is None:
        return None, {}
    projected, peak, rows = memory
    pids = {r["pid"] for r in rows}
    reserve = measured_reserve(run, [p for p in run.workers(loader.loader_id) if p.pid in pids],
                               [int(r["uss_peak_bytes"]) for r in rows])  # fmt: skip
    budget = _memory_for_workers(run, sum(r["uss_peak_bytes"] for r in rows), reserve)
    fit_memory = workers_that_fit(budget, projected, reserve.per_worker)
    return fit_memory, {
        "worker_uss_peak_bytes": peak,
        "projected_worker_bytes": projected,
        "memory_for_workers_bytes": budget,
        "workers_that_fit_memory": fit_memory,
        **reserve.evidence(),
        "workers": cast("list[WorkerRow]", rows),  # rows: the JSON schema checks their keys in the tests
    }
