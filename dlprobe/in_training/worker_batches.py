"""Per-batch timing inside a DataLoader worker (start, fetch and collate time, on a CPU and queued), sent in chunks."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_WORKER_BATCHES, WORKER_BATCH_CAP

FLUSH_INTERVAL_S = 0.5  # one write per worker per half second at most, like the loop's chunks
_now = time.time
# The fetching thread's own CPU time: exact to the call (the kernel adds the running slice), unlike schedstat's
# first field, which lags by up to a scheduler tick, a large part of a few-millisecond batch.
_thread_cpu = time.thread_time
QUEUED_UNKNOWN = -1.0  # a row's queued seconds where the kernel's schedstat could not be read
Row = tuple[int, float, float, float, int, float, float, float]


def _open_run_delay() -> int | None:
    """This thread's schedstat (its second field: ns spent runnable but waiting for a core), kept open: re-reading
    it at offset 0 costs about 1.5 us. None where the kernel has no schedstat (CONFIG_SCHED_INFO off)."""
    try:
        return os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return None


class WorkerBatches:
    """One worker's rows; past WORKER_BATCH_CAP rows the stride doubles, so a long run keeps a log-bounded share."""

    def __init__(self, loader_id: int, worker_id: int) -> None:
        self.loader_id = loader_id
        self.worker_id = worker_id
        self.rows: list[Row] = []
        self.t0 = 0.0
        self.stride = 1
        self.kept = 0  # rows kept at the current stride
        self.last_flush = _now()
        # A fetch's clocks (thread CPU time at its start and at the collate): the wall time alone
        # cannot tell a worker computing from one blocked on a read or one waiting for a core.
        self.run_delay_fd = _open_run_delay()
        self.cpu_start = self.cpu_collate = 0.0
        # One schedstat read per batch, at its end (each read costs ~3 us on a loaded machine, a thread CPU clock
        # ~0.6 us): a batch's queued time runs from the previous batch's end, so it includes the wait for a core
        # after waking for the next index, which is queued time too.
        self.queued_last = self._queued()

    def _queued(self) -> float:
        fd = self.run_delay_fd
        if fd is None:
            return 0.0
        try:
            return int(os.pread(fd, 64, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            self.run_delay_fd = None  # read once wrong, never again: the rows say unknown from here on
            return 0.0

    def begin(self) -> None:
        """Called as a fetch starts (before the dataset is asked for anything)."""
        self.cpu_start = _thread_cpu()

    def collating(self) -> None:
        """Called as the samples are handed to the collate function."""
        self.cpu_collate = _thread_cpu()

    def add(self, slot: Any, fetches: int, start: float, collate: float, end: float, first: int) -> None:
        cpu_end = _thread_cpu()
        queued = QUEUED_UNKNOWN
        if self.run_delay_fd is not None:
            now = self._queued()
            queued, self.queued_last = now - self.queued_last, now
        task = _task()
        slot.keep_recent(task, start, collate, end, first)  # every batch: what a kill or a hang leaves unsent
        if fetches % self.stride:
            return
        if not self.rows:
            self.t0 = start
        # rounded in flush(), off the per-batch path
        self.rows.append((task, start, collate, end, first, self.cpu_collate - self.cpu_start,
                          cpu_end - self.cpu_collate, queued))  # fmt: skip
        self.kept += 1
        if self.kept >= WORKER_BATCH_CAP:
            self.stride, self.kept = self.stride * 2, 0
        if end - self.last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        self.last_flush = _now()
        if not self.rows:
            return
        t0 = self.t0
        rows = [
            [task, round(start - t0, 6), round(collate - start, 6), round(end - collate, 6), first,
             round(fetch_cpu, 6), round(collate_cpu, 6), round(queued, 6)]
            for task, start, collate, end, first, fetch_cpu, collate_cpu, queued in self.rows
        ]  # fmt: skip
        self.rows = []
        log = get_log()
        if log is not None:
            log.emit(
                EV_WORKER_BATCHES,
                loader=self.loader_id,
                worker=self.worker_id,
                t0=round(t0, 6),
                rows=rows,
                stride=self.stride,
            )


def _task() -> int:
    """The batch's number in the iterator's order: torch's worker loop holds it as `idx` (the frame that called
    our fetcher); -1 where a torch version names it otherwise."""
    try:
        frame = sys._getframe(3)  # _task <- add <- the fetcher <- _worker_loop
        if frame.f_code.co_name == "_worker_loop":
            idx = frame.f_locals.get("idx")
            return idx if type(idx) is int else -1
    except Exception:  # noqa: S110 - another torch's loop frame: the batch is still recorded, as task -1
        pass
    return -1


recorder: WorkerBatches | None = None


def start(loader_id: int, worker_id: int) -> None:
    """Record this worker's batches, and send what is left when it exits normally (multiprocessing's finalizers
    run there; torch's workers never run atexit)."""
    global recorder
    try:
        from multiprocessing import util

        recorder = WorkerBatches(loader_id, worker_id)
        util.Finalize(None, flush, exitpriority=10)
    except Exception as exc:
        recorder = None
        probe_errors.record("worker_batches.start", exc, f"worker {worker_id}'s batches are missing from trace.json")


def flush() -> None:
    if recorder is not None:
        try:
            recorder.flush()
        except Exception as exc:  # never break the worker's exit for the trace
            probe_errors.record("worker_batches.flush", exc, "a worker's last batches are missing from trace.json")
