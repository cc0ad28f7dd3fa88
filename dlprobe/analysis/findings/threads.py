"""Loaders whose workers are threads of the training process (worker_method="thread"): what is measured per thread."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.run.model import LoaderRecord, RunData, ThreadRecord

# What the report cannot say about thread workers, and why (finding codes, and the per-worker memory rows): each
# premise is a worker process.
NOT_APPLICABLE = {
    "cow-growth": "nothing is forked: no worker copies the parent's pages",
    "spawn-copy": "no worker process receives a pickled copy of the dataset: the threads share the one object",
    "fork-hazard": "nothing is forked, so no lock or thread is inherited half-way",
    "worker USS/PSS": "a thread has no USS or PSS of its own: the training process's row holds the threads' memory",
    "worker-killed": "a thread cannot be killed alone: a signal or the OOM killer ends the whole training process",
    "shm-pressure": "batches reach the loop through an in-process queue, not through /dev/shm",
    "worker-hotspots": "py-spy samples the threads inside the training process: they are not told apart from the loop",
}


def _thread_time(thread: ThreadRecord, started: float | None) -> tuple[float, float, float | None] | None:
    """(wall, CPU, run-queue seconds) from the thread's start to its last reading, or None where none was read.

    A thread's counters start at 0 when it is created, so its last reading is exact up to that moment; what it
    used after (at most one sampling tick) is missing, so the CPU time is a lower bound."""
    readings = [
        (t, cpu, runq)
        for t, cpu, runq in zip(thread.series.t, thread.series.cpu, thread.series.runq, strict=False)
        if cpu is not None
    ]
    if not readings or started is None or readings[-1][0] <= started:
        return None
    t1, cpu1, runq1 = readings[-1]
    return t1 - started, cpu1, runq1


def _per_worker(run: RunData, loader: LoaderRecord) -> list[dict[str, Any]]:
    """One row per worker id: its threads (a new one each epoch without persistent_workers), batches, CPU."""
    ids = sorted({wid for e in loader.epochs for wid in e.worker_tids.values()} | set(range(loader.num_workers)))
    rows = []
    for wid in ids:
        batches = [e.worker_batches[wid] for e in loader.epochs if e.worker_batches and wid < len(e.worker_batches)]
        mine = [t for t in run.worker_threads(loader.loader_id) if t.worker_id == wid]
        # the iterator that started a thread started it within its epoch's iter_s: the wall time is not too short
        started = {tid: e.t_start for e in loader.epochs for tid in e.worker_tids}
        times = [tt for tt in (_thread_time(t, started.get(t.tid)) for t in mine) if tt is not None]
        wall = sum(tt[0] for tt in times)
        cpu = sum(tt[1] for tt in times)
        runqs = [tt[2] for tt in times]
        runq = sum(r for r in runqs if r is not None) if runqs and None not in runqs else None
        rows.append(
            {
                "worker_id": wid,
                "tids": sorted({tid for e in loader.epochs for tid, w in e.worker_tids.items() if w == wid}),
                "batches": sum(batches) if batches else None,  # None: the iterator did not say which worker
                "cpu_s": round(cpu, 2) if times else None,  # None: the supervisor read no CPU time of it
                "cpu_share": round(cpu / wall, 3) if wall > 0 else None,
                "runq_share": round(runq / wall, 3) if wall > 0 and runq is not None else None,
            }
        )
    return rows


def _row_text(row: dict[str, Any]) -> str:
    batches = "batches not counted" if row["batches"] is None else f"{row['batches']} batches"
    if row["cpu_share"] is None:
        cpu = "CPU time not read"
    else:
        cpu = f"at least {row['cpu_s']:.2f} s of CPU ({100 * row['cpu_share']:.0f}% of a core while it ran)"
    tids = ", ".join(str(t) for t in row["tids"]) or "?"
    return f"worker {row['worker_id']} (thread {tids}): {batches}, {cpu}"


def find_thread_workers(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        if not loader.thread_workers:
            continue
        rows = _per_worker(run, loader)
        not_read = [r["worker_id"] for r in rows if r["cpu_share"] is None]
        detail = (
            f"Loader {loader.loader_id} ran its workers as threads of the training process. Per thread: "
            + "; ".join(_row_text(r) for r in rows)
            + ". A thread asleep may be waiting for the GIL rather than for a read, so dlprobe does not call these "
            "workers I/O-bound or CPU-bound. These findings do not apply to this loader and are not looked for: "
            + "; ".join(f"{code} ({why})" for code, why in NOT_APPLICABLE.items())
            + "."
        )
        if not_read:
            detail += f" The CPU time of worker(s) {', '.join(map(str, not_read))} was not read: no number is shown."
        findings.append(
            Finding(
                code="thread-workers",
                severity="info",
                title=f"Loader {loader.loader_id}'s {len(rows)} workers are threads of the training process "
                '(worker_method="thread"): batches and CPU per thread; memory, kill and /dev/shm findings do not apply',
                detail=detail,
                fix="Nothing to fix by itself: this is what dlprobe measures for thread workers. If the loop waits for "
                'data and the threads together use about one core, they take turns on the GIL: worker_method="multi'
                'processing" (the default) gives each worker an interpreter of its own.',
                evidence={
                    "worker_method": "thread",
                    # "threads" is a thread count wherever else it appears (a stuck process's /proc reading)
                    "worker_threads": rows,
                    "threads_cpu_share": _total_share(rows),
                    "not_applicable": list(NOT_APPLICABLE),
                },
                loader_id=loader.loader_id,
            )
        )
    return findings


def _total_share(rows: list[dict[str, Any]]) -> float | None:
    """The threads' CPU shares summed: near 1 core for Python-bound threads that hold the GIL in turn."""
    shares = [r["cpu_share"] for r in rows]
    return None if not shares or None in shares else round(sum(shares), 3)
