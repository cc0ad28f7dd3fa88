"""Per-batch timing inside a DataLoader worker (start, fetch and collate time, on a CPU and queued), sent in chunks."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from dlprobe.in_training import probe_errors, worker_attrs, worker_gc
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


# Batches each loader delivered over the epochs so far (set by the hooks in the training process): a worker forked
# for a new epoch inherits it and starts at the stride a worker of the first epoch would have reached by then, so a
# run of many epochs keeps a log-bounded share of rows too, not WORKER_BATCH_CAP more per worker and epoch.
loader_batches: dict[int, int] = {}


def stride_after(batches: int) -> int:
    """The stride a recorder reaches after `batches` fetches: WORKER_BATCH_CAP kept at 1, as many at 2, ..."""
    stride, left = 1, batches
    while left >= WORKER_BATCH_CAP * stride:
        left -= WORKER_BATCH_CAP * stride
        stride *= 2
    return stride


def _inherited_stride(loader_id: int) -> int:
    before = loader_batches.get(loader_id, 0)
    if not before:
        return 1
    try:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        workers = info.num_workers if info is not None else 1
    except Exception:  # no torch worker info: as if one worker had delivered them all (a larger stride)
        workers = 1
    return stride_after(before // max(1, workers))


class WorkerBatches:
    """One worker's rows; past WORKER_BATCH_CAP rows the stride doubles, so a long run keeps a log-bounded share."""

    def __init__(self, loader_id: int, worker_id: int, tid: int | None = None, stride: int = 1) -> None:
        self.loader_id = loader_id
        self.worker_id = worker_id
        self.tid = tid  # a thread worker's native thread id: its events carry the process's pid
        self.thread: threading.Thread | None = None
        self.rows: list[Row] = []
        self.t0 = 0.0
        self.stride = stride
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
        # The dataset's attribute sizes (worker_attrs), read on this recorder's clock: a worker process's only.
        self.attrs: worker_attrs.AttrCounter | None = None

    def _queued(self) -> float:
        fd = self.run_delay_fd
        if fd is None:
            return 0.0
        try:
            return int(os.pread(fd, 64, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            self.run_delay_fd = None  # read once wrong, never again: the rows say unknown from here on
            return 0.0

    def close(self) -> None:
        """Close the schedstat file: a worker process closes it as it exits, a worker thread's recorder when the
        thread has ended (a new iterator's threads would otherwise hold one more file each epoch)."""
        fd, self.run_delay_fd = self.run_delay_fd, None
        if fd is not None:
            os.close(fd)

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
        attrs = self.attrs
        if attrs is not None and end >= attrs.due:  # one comparison per batch; a reading about once a second
            attrs.tick(fetches)
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
        if self.tid is None:  # a worker process's own collector (a thread worker shares the training's)
            worker_gc.send(self.loader_id, self.worker_id, os.getpid())
        # Taken in one step: the training loop flushes a thread worker's rows at the epoch's end, maybe while the
        # thread still adds one (a row added to the list taken is sent with it, one added after waits).
        taken, self.rows = self.rows, []
        if not taken:
            return
        t0 = self.t0
        rows = [
            [task, round(start - t0, 6), round(collate - start, 6), round(end - collate, 6), first,
             round(fetch_cpu, 6), round(collate_cpu, 6), round(queued, 6)]
            for task, start, collate, end, first, fetch_cpu, collate_cpu, queued in taken
        ]  # fmt: skip
        thread = {} if self.tid is None else {"tid": self.tid}
        log = get_log()
        if log is not None:
            log.emit(
                EV_WORKER_BATCHES,
                loader=self.loader_id,
                worker=self.worker_id,
                t0=round(t0, 6),
                rows=rows,
                stride=self.stride,
                **thread,
            )


# The frame that calls the fetcher, and its name for the batch's number: torch up to 2.15 (`_worker_loop`, `idx`);
# torch's main branch shares one loop between process and thread workers (`_base_worker_loop`, `task_id`).
_LOOP_TASK_NAMES = {"_worker_loop": "idx", "_base_worker_loop": "task_id"}


def _task() -> int:
    """The batch's number in the iterator's order: torch's worker loop holds it (the frame that called our
    fetcher); -1 where a torch version names it otherwise."""
    try:
        frame = sys._getframe(3)  # _task <- add <- the fetcher <- the worker loop
        name = _LOOP_TASK_NAMES.get(frame.f_code.co_name)
        if name is not None:
            idx = frame.f_locals.get(name)
            return idx if type(idx) is int else -1
    except Exception:  # noqa: S110 - another torch's loop frame: the batch is still recorded, as task -1
        pass
    return -1


recorder: WorkerBatches | None = None
# Thread workers' recorders, by loader: a thread never exits through multiprocessing's finalizers, so the training
# loop sends what they hold at each epoch's end and at exit.
_thread_recorders: dict[int, list[WorkerBatches]] = {}
_thread_lock = threading.Lock()


def start(loader_id: int, worker_id: int) -> WorkerBatches | None:
    """Record this worker process's batches, and send what is left when it exits normally (multiprocessing's
    finalizers run there; torch's workers never run atexit)."""
    global recorder
    try:
        from multiprocessing import util

        recorder = WorkerBatches(loader_id, worker_id, stride=_inherited_stride(loader_id))
        util.Finalize(None, flush, exitpriority=10)
    except Exception as exc:
        recorder = None
        probe_errors.record("worker_batches.start", exc, f"worker {worker_id}'s batches are missing from trace.json")
    return recorder


def start_thread(loader_id: int, worker_id: int, tid: int) -> WorkerBatches:
    """Record a worker thread's batches; flush_threads sends what it holds when the loop asks."""
    rec = WorkerBatches(loader_id, worker_id, tid)
    rec.thread = threading.current_thread()
    with _thread_lock:  # several worker threads start at once
        _thread_recorders.setdefault(loader_id, []).append(rec)
    return rec


def flush_threads(loader_id: int | None = None) -> None:
    """Send the rows the worker threads of a loader (of every loader: None) still hold."""
    with _thread_lock:
        chosen = [r for lid, recs in _thread_recorders.items() if loader_id in (None, lid) for r in recs]
    for rec in chosen:
        _flush_one(rec)
    with _thread_lock:  # threads that have ended send nothing more: a loader's new workers each epoch add none up
        for lid, recs in _thread_recorders.items():
            ended = [r for r in recs if r in chosen and not (r.thread and r.thread.is_alive())]
            for rec in ended:
                rec.close()
            _thread_recorders[lid] = [r for r in recs if r not in ended]


def flush() -> None:
    if recorder is not None:
        _flush_one(recorder)


def _flush_one(rec: WorkerBatches) -> None:
    try:
        rec.flush()
    except Exception as exc:  # never break the worker's exit (or the loop) for the trace
        probe_errors.record("worker_batches.flush", exc, "a worker's last batches are missing from trace.json")
