"""Per-batch timing inside a DataLoader worker (start, fetch and collate time), sent in chunks, bounded per worker."""

from __future__ import annotations

import sys
import time
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_WORKER_BATCHES, WORKER_BATCH_CAP

FLUSH_INTERVAL_S = 0.5  # one write per worker per half second at most, like the loop's chunks
_now = time.time


class WorkerBatches:
    """One worker's rows; past WORKER_BATCH_CAP rows the stride doubles, so a long run keeps a log-bounded share."""

    def __init__(self, loader_id: int, worker_id: int) -> None:
        self.loader_id = loader_id
        self.worker_id = worker_id
        self.rows: list[tuple[int, float, float, float, int]] = []
        self.t0 = 0.0
        self.stride = 1
        self.kept = 0  # rows kept at the current stride
        self.last_flush = _now()

    def add(self, slot: Any, fetches: int, start: float, collate: float, end: float, first: int) -> None:
        task = _task()
        slot.keep_recent(task, start, collate, end, first)  # every batch: what a kill or a hang leaves unsent
        if fetches % self.stride:
            return
        if not self.rows:
            self.t0 = start
        self.rows.append((task, start, collate, end, first))  # rounded in flush(), off the per-batch path
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
            [task, round(start - t0, 6), round(collate - start, 6), round(end - collate, 6), first]
            for task, start, collate, end, first in self.rows
        ]
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
