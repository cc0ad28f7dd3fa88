"""Where the workers' time goes while the loop runs: on a CPU, waiting for a core, or asleep (a read, the network).

The sampler reads each process's cumulative CPU time (utime+stime) and run-queue wait (schedstat) four times a
second; over the loop's steady windows (loop_timing.steady_window) their growth divided by the wall time is each
worker's share. Waiting for a core counts as wanting the CPU: on an oversubscribed machine a CPU-bound worker is
runnable, not asleep, and more workers would only queue longer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.loop_timing import steady_window
from dlprobe.analysis.measures.timed_batches import timed_batches
from dlprobe.analysis.run.model import LoaderRecord, ProcessRecord, RunData
from dlprobe.loader_model.limits import CPU_BOUND_SHARE, IO_BOUND_WAIT

# Less wall time than this, summed over the workers' steady windows, is too little to divide by: the CPU clock
# ticks in 10 ms steps and the readings come every 0.25 s.
INPUT_BOUND_SHARE = 0.3  # the loop waits for data at least this share of its steady time
BUSY_RUNQ_SHARE = 0.2  # a process waited for a core this share of its time: the machine was busy
MIN_WALL_S = 0.5
# Workers that spent less than this share of their time building batches (fetch + collate, timed in the worker)
# were waiting for their next index, not for a read: what the loop waits for is the hand-over, not the loading.
IDLE_FETCH_SHARE = 0.5
MIN_FETCH_ROWS = 8  # batches timed in the workers before their share is worth a conclusion
CPU_BOUND, IO_BOUND, MIXED = "CPU-bound", "I/O-bound", "partly CPU-bound"
HAND_OVER = "hand-over-bound"


@dataclass
class WorkerTime:
    pid: int
    worker_id: int | None
    wall_s: float
    cpu_s: float
    runq_s: float | None  # None: the kernel's schedstat was not read

    def to_dict(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "pid": self.pid, "wall_s": round(self.wall_s, 2),
                "cpu_share": round(self.cpu_s / self.wall_s, 3),
                "runq_share": None if self.runq_s is None else round(self.runq_s / self.wall_s, 3)}  # fmt: skip


@dataclass
class LoaderCpu:
    """The loader's workers over the loop's steady windows; shares are of their summed wall time."""

    workers: list[WorkerTime]
    fetch_share: float | None = None  # the share of their time the workers spent building batches; None: not timed

    @property
    def wall_s(self) -> float:
        return sum(w.wall_s for w in self.workers)

    @property
    def cpu_share(self) -> float:
        return sum(w.cpu_s for w in self.workers) / self.wall_s

    @property
    def runq_share(self) -> float | None:
        if any(w.runq_s is None for w in self.workers):
            return None
        return sum(w.runq_s or 0.0 for w in self.workers) / self.wall_s

    @property
    def busy_share(self) -> float:
        """On a CPU or waiting for one: the share of a core each worker wants."""
        return min(1.0, self.cpu_share + (self.runq_share or 0.0))

    @property
    def wait_share(self) -> float:
        """Asleep: neither running nor runnable (waiting for a read, a lock, the network)."""
        return 1.0 - self.busy_share

    @property
    def bound(self) -> str:
        if self.busy_share >= CPU_BOUND_SHARE:
            return CPU_BOUND
        if self.fetch_share is not None and self.fetch_share < IDLE_FETCH_SHARE:
            return HAND_OVER  # asleep, but between batches (no index to work on), not inside them
        return IO_BOUND if self.wait_share >= IO_BOUND_WAIT else MIXED

    def describe(self) -> str:
        """The measured shares in words, e.g. 'on a CPU 4%, waiting for a core 1%, asleep 95%'."""
        runq = self.runq_share
        queued = f", waiting for a core {100 * runq:.0f}%" if runq is not None else ""
        building = f", building batches {100 * self.fetch_share:.0f}%" if self.fetch_share is not None else ""
        return f"on a CPU {100 * self.cpu_share:.0f}%{queued}, asleep {100 * self.wait_share:.0f}%{building}"

    def evidence(self) -> Evidence:
        return {
            "bound": self.bound,
            "worker_cpu_share": round(self.cpu_share, 3),
            "worker_runq_share": None if self.runq_share is None else round(self.runq_share, 3),
            "worker_wait_share": round(self.wait_share, 3),
            "worker_wall_s": round(self.wall_s, 2),
            "worker_fetch_share": None if self.fetch_share is None else round(self.fetch_share, 3),
            "worker_times": [w.to_dict() for w in self.workers],
        }


def _window_growth(proc: ProcessRecord, lo: float, hi: float) -> tuple[float, float, float | None] | None:
    """(wall, cpu, run-queue seconds) between the first and last readings with CPU time inside [lo, hi]."""
    inside = [
        (t, cpu, runq)
        for t, cpu, runq in zip(proc.series.t, proc.series.cpu, proc.series.runq, strict=False)
        if cpu is not None and lo <= t <= hi
    ]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, cpu0, runq0), (t1, cpu1, runq1) = inside[0], inside[-1]
    runq = runq1 - runq0 if runq0 is not None and runq1 is not None else None
    return t1 - t0, max(0.0, cpu1 - cpu0), None if runq is None else max(0.0, runq)


def loader_cpu(run: RunData, loader: LoaderRecord, skip_worker_ids: frozenset[int] = frozenset()) -> LoaderCpu | None:
    """The workers' CPU and waiting shares while the loop ran, or None where CPU time was not read (or too briefly).

    `skip_worker_ids`: workers left out (ones that delivered no batch idle on purpose; their sleep is not I/O)."""
    if loader.num_workers == 0:
        return None
    windows = [w for w in (steady_window(e) for e in loader.epochs) if w is not None]
    workers = []
    for proc in run.workers(loader.loader_id):
        if proc.worker_id in skip_worker_ids:
            continue
        wall = cpu = 0.0
        runq: float | None = 0.0
        for lo, hi in windows:
            grown = _window_growth(proc, lo, hi)
            if grown is None:
                continue
            wall, cpu = wall + grown[0], cpu + grown[1]
            runq = None if runq is None or grown[2] is None else runq + grown[2]
        if wall > 0:
            workers.append(WorkerTime(proc.pid, proc.worker_id, wall, cpu, runq))
    if not workers or sum(w.wall_s for w in workers) < MIN_WALL_S:
        return None
    return LoaderCpu(workers, fetch_share(run, loader, skip_worker_ids))


def fetch_share(run: RunData, loader: LoaderRecord, skip_worker_ids: frozenset[int] = frozenset()) -> float | None:
    """The share of their time the workers spent inside fetch and collate over the loop's steady windows, from the
    batches they timed themselves (`worker_batches` events: each row's start, fetch and collate seconds; a row kept
    at stride k stands for k batches); None where too few batches were timed."""
    windows = [w for w in (steady_window(e) for e in loader.epochs) if w is not None]
    # by the writing worker's pid (a worker thread's native id): ids repeat across epochs
    rows: dict[int, list[tuple[float, float]]] = {}
    for row in timed_batches(run, loader.loader_id):
        if row.worker not in skip_worker_ids:
            rows.setdefault(row.writer, []).append((row.start, row.build_s * row.stride))
    busy = wall = 0.0
    timed = 0
    for batches in rows.values():
        for lo, hi in windows:
            inside = [seconds for start, seconds in batches if lo <= start <= hi]
            if inside:  # the window counts for this worker only where it was alive and building
                busy, wall, timed = busy + sum(inside), wall + (hi - lo), timed + len(inside)
    if timed < MIN_FETCH_ROWS or wall <= 0:
        return None
    return min(1.0, busy / wall)


def idle_worker_ids(loader: LoaderRecord) -> frozenset[int]:
    """Workers that delivered no batch in an epoch whose per-worker counts were recorded: they sat idle on purpose
    (nothing to read), so their sleep says nothing about how the others load."""
    return frozenset(
        worker_id
        for epoch in loader.epochs
        if epoch.worker_batches is not None
        for worker_id, count in enumerate(epoch.worker_batches)
        if count == 0
    )


def main_cpu_share(run: RunData, loader: LoaderRecord) -> float | None:
    """The CPU share of the process that iterates the loader over the loop's steady windows (receiving each batch and
    the loop's own step, all its threads), or None where it was not read, too briefly, or its workers are threads of
    it (their CPU time is then the process's too)."""
    if loader.thread_workers:
        return None
    time = main_time(run, loader)
    return time[1] / time[0] if time is not None else None


def main_time(run: RunData, loader: LoaderRecord) -> tuple[float, float, float | None] | None:
    """(wall, CPU, run-queue seconds) of the process that iterates a loader with workers over the loop's steady
    windows, or None where it was not read or too briefly (run-queue None: the kernel's schedstat was not read)."""
    if loader.num_workers == 0:
        return None
    pid = loader.writer
    main = next((p for p in run.processes if (p.pid == pid if pid is not None else p.role == "main")), None)
    if main is None:
        return None
    wall = cpu = 0.0
    runq: float | None = 0.0
    for lo, hi in (w for w in (steady_window(e) for e in loader.epochs) if w is not None):
        grown = _window_growth(main, lo, hi)
        if grown is not None:
            wall, cpu = wall + grown[0], cpu + grown[1]
            runq = None if runq is None or grown[2] is None else runq + grown[2]
    return (wall, cpu, runq) if wall >= MIN_WALL_S else None
