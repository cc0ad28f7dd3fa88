"""One DataLoader's probe: its epochs, the loop's wait for each batch, the batches each worker delivered, the
hand-over off the result queue, repeated samples, and the events that carry them (epoch, batches, epoch_end, ...).

hooks.py makes one LoaderProbe per loader (loader_start.probe_for) and calls it from the probed __iter__/__next__.
It holds the loader's iterators only weakly, and no frame or traceback.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import weakref
from typing import Any

from dlprobe.in_training import identity, probe_errors, sample_check, sample_order, worker_batches
from dlprobe.in_training.batch_info import describe_batch
from dlprobe.in_training.event_log import emit
from dlprobe.in_training.hand_over import HandOverClock, attach_to
from dlprobe.in_training.sample_hashes import ROW_BYTES, SKETCH_ROW_BYTES, DuplicateCounter
from dlprobe.in_training.wait_fold import WaitFolder
from dlprobe.redact import redact_text
from dlprobe.rundir.schema import (
    EV_BATCH_INFO,
    EV_BATCHES,
    EV_DUPES,
    EV_EPOCH,
    EV_EPOCH_END,
    EV_LOADER_ERROR,
    EV_SAMPLE_ORDER,
    EV_WORKERS_LAST,
    FOLDED_FLUSH_S,
)
from dlprobe.system.procmem import read_smaps_rollup

FLUSH_INTERVAL_S = 0.25  # batch timings are sent in chunks so a fast loop costs one write per chunk


class LoaderProbe:
    """Everything the probe tracks for one DataLoader object."""

    def __init__(self, loader_id: int) -> None:
        self.loader_id = loader_id
        self.epoch = -1
        self.batches = 0
        self.waits = WaitFolder()  # the loop's waits (and hand-overs) per batch, folded past a size
        self.epoch_first = False  # the next batch is its epoch's first
        self.last_flush = time.perf_counter()
        self.epoch_open = False
        self.described_batch = False
        self.hash_samples = False  # IterableDatasets: count repeated samples (workers without sharding)
        self.iterable = False
        self.dupes: DuplicateCounter | None = None
        self.last_batch: int | None = None  # the count of batches at the epoch's last one: workers read once more
        self.worker_pids: list[int] = []
        self.read_last_in = -1  # the epoch whose workers were read once more, at its last batch or as they stopped
        self.epoch_iterator: weakref.ref[Any] | None = None  # the iterator of the epoch now open
        # Batches each worker delivered this epoch (by worker id); None where the iterator does not say which
        # worker a batch came from. A worker with none read nothing: an IterableDataset with fewer shards than workers.
        self.worker_batches: list[int] | None = None
        self.threads = False  # the workers are threads of this process (torch's worker_method="thread")
        # The main process's time taking each batch off the workers' result queue (dlprobe/in_training/hand_over.py),
        # per batch alongside its wait: the part of the wait the workers cannot shorten.
        self.clock = HandOverClock()
        self.clock_timed = False  # this epoch's iterator's queue is timed
        self.clock_seen = 0.0

    def count_worker_batches(self, iterator: Any, new_iterator: bool) -> None:
        """Count batches per worker from here on: torch's multiprocessing iterator passes every batch it returns
        through _process_data(data, worker_id, ...) exactly once (torchdata's too), so one wrapper adds one call."""
        self.worker_batches = None
        workers = getattr(iterator, "_workers", None)
        original = getattr(iterator, "_process_data", None)
        if not workers or original is None:
            return
        if not getattr(original, "_dlprobe_wrapper", False):
            if not new_iterator:
                return  # an iterator made before the probe saw it: no counts rather than half of them
            import inspect  # here, once per loader: at the top it would cost every probed script's start-up

            if not inspect.ismethod(original):
                return  # not the iterator's own method: nothing to wrap without holding the iterator
            try:
                params = list(inspect.signature(original).parameters)
            except (TypeError, ValueError):
                return
            if len(params) < 2 or "worker" not in params[1]:
                return  # an older torch, whose _process_data is not told the worker
            iterator._process_data = _count_by_worker(self, original)
        self.worker_batches = [0] * len(workers)

    def time_hand_over(self, iterator: Any) -> None:
        """Time the main process's hand-over on this iterator's result queue (persistent workers: already timed)."""
        self.clock_timed = False
        if not getattr(iterator, "_workers", None):
            return
        try:
            self.clock_timed = attach_to(iterator, self.clock)
        except Exception as exc:  # never break training for a timing
            probe_errors.record("hooks.hand_over", exc, f"loader {self.loader_id}'s hand-over is not timed")
        self.clock_seen = self.clock.seconds

    def begin_epoch(self, iterator: Any, new_iterator: bool, iter_s: float) -> None:
        self.flush()
        self.epoch += 1
        self.epoch_open = True
        self.epoch_first = True
        try:
            self.epoch_iterator = weakref.ref(iterator)
        except TypeError:  # an iterator that takes no weak reference: never read as it stops
            self.epoch_iterator = None
        self.described_batch = False
        self.dupes = (
            DuplicateCounter(
                in_distributed_job(),
                ROW_BYTES if self.iterable else SKETCH_ROW_BYTES,
                per_batch=not self.iterable,  # a map-style loader is hashed for the ranks' sketch only
            )
            if self.hash_samples
            else None
        )
        identity.emit_if_changed()  # Lightning's rank 0 learns its rank only once the process group is up
        self.threads = thread_workers(iterator)
        if self.threads:
            self._begin_thread_epoch(iterator, new_iterator, iter_s)
            return
        workers = None
        if new_iterator and hasattr(iterator, "_workers"):
            # Read each new worker once right here: a forked worker starts copying pages at once, and the
            # supervisor hears of the pid only on its next tick, too late for a true starting point.
            workers = [
                {"worker_id": i, "pid": w.pid, "memory": read_smaps_rollup(w.pid)}
                for i, w in enumerate(iterator._workers)
            ]
        gc_state = _gc_at_fork() if workers else None
        emit(EV_EPOCH, loader=self.loader_id, epoch=self.epoch, iter_s=round(iter_s, 6), workers=workers, gc=gc_state)
        try:
            self.count_worker_batches(iterator, new_iterator)
        except Exception as exc:  # never break training for a count
            self.worker_batches = None
            probe_errors.record("hooks.worker_batches", exc, f"loader {self.loader_id}'s batches per worker")
        self.time_hand_over(iterator)
        self.last_batch, self.worker_pids = None, []
        if getattr(iterator, "_workers", None) and not getattr(iterator, "_persistent_workers", True):
            try:  # torch joins non-persistent workers before the StopIteration that ends the epoch reaches us
                self.last_batch = self.batches + len(iterator)  # self.batches counts over every epoch
                self.worker_pids = [w.pid for w in iterator._workers]
            except Exception:
                self.last_batch = None  # no length (an IterableDataset): the supervisor's readings must do

    def _begin_thread_epoch(self, iterator: Any, new_iterator: bool, iter_s: float) -> None:
        """Workers that are threads of this process: no pid, no memory of their own, nothing forked; each is known
        by its native thread id (the supervisor reads its CPU time in /proc/PID/task/TID)."""
        threads = None
        if new_iterator:
            threads = [{"worker_id": i, "tid": w.native_id} for i, w in enumerate(iterator._workers)]
        emit(
            EV_EPOCH,
            loader=self.loader_id,
            epoch=self.epoch,
            iter_s=round(iter_s, 6),
            workers=None,
            gc=None,
            worker_method="thread",
            threads=threads,
        )
        try:
            self.count_worker_batches(iterator, new_iterator)
        except Exception as exc:  # never break training for a count
            self.worker_batches = None
            probe_errors.record("hooks.worker_batches", exc, f"loader {self.loader_id}'s batches per worker")
        self.last_batch, self.worker_pids = None, []  # no worker process to read at the epoch's last batch

    def record_batch(self, wait_s: float, batch: Any) -> None:
        self.batches += 1
        if self.batches == self.last_batch and self.read_last_in != self.epoch:
            self.read_workers_last()
        handover = None
        if self.clock_timed:
            handover = self.clock.seconds - self.clock_seen
            self.clock_seen = self.clock.seconds
        self.waits.add(wait_s, handover, self.epoch_first)  # rounded once per chunk in flush(), not on every batch
        self.epoch_first = False
        if not self.described_batch:
            self.described_batch = True
            emit(EV_BATCH_INFO, loader=self.loader_id, epoch=self.epoch, **describe_batch(batch))
        if self.dupes is not None:
            try:
                self.dupes.add_batch(batch)
            except Exception as exc:  # an odd batch must never break training; stop counting instead
                self.dupes = None
                probe_errors.record(
                    "hooks.dupes", exc, f"repeated samples of loader {self.loader_id} are no longer counted"
                )
        if time.perf_counter() - self.last_flush >= (FOLDED_FLUSH_S if self.waits.folded else FLUSH_INTERVAL_S):
            self.flush()

    def read_workers_last(self, pids: list[int] | None = None) -> None:
        """The workers' memory once they have served the epoch's last batch, or as they are stopped before it (one
        smaps_rollup each, once per epoch)."""
        self.read_last_in = self.epoch
        try:
            readings = [{"pid": pid, "memory": read_smaps_rollup(pid)} for pid in pids or self.worker_pids]
            emit(EV_WORKERS_LAST, loader=self.loader_id, epoch=self.epoch, workers=readings)
        except Exception as exc:  # never break training for a reading
            probe_errors.record("hooks.workers_last", exc, f"loader {self.loader_id}'s last worker readings")

    def read_workers_stopping(self, iterator: Any) -> None:
        """An epoch left before its end (a loop that breaks, an iterator dropped): torch is about to stop its
        workers, and the supervisor's last reading of them may be seconds old; read them once more now. Only the
        open epoch's own iterator: an older one dropped after the next was made is not this epoch's."""
        if (
            not self.epoch_open
            or self.threads
            or self.read_last_in == self.epoch
            or getattr(iterator, "_shutdown", True)
            or (self.epoch_iterator and self.epoch_iterator()) is not iterator
        ):
            return
        pids = [w.pid for w in getattr(iterator, "_workers", None) or [] if w.pid is not None]
        if pids:
            self.read_workers_last(pids)

    def end_epoch(self) -> None:
        if self.epoch_open:
            if self.threads:
                worker_batches.flush_threads(self.loader_id)
            self.flush()
            self.epoch_open = False
            emit(EV_EPOCH_END, loader=self.loader_id, epoch=self.epoch, batches=self.batches, **self._per_worker())
            order = sample_order.take(self.epoch_iterator and self.epoch_iterator())
            if order is not None:
                emit(EV_SAMPLE_ORDER, loader=self.loader_id, epoch=self.epoch, **order)

    def record_error(self, exc: BaseException, iterator: Any = None) -> None:
        self.flush()
        cause = exc.__cause__
        emit(
            EV_LOADER_ERROR,
            loader=self.loader_id,
            epoch=self.epoch,
            type=type(exc).__name__,
            message=redact_text(str(exc)[:4000]),
            cause=redact_text(f"{type(cause).__name__}: {cause}"[:2000]) if cause is not None else None,
        )
        if iterator is not None:
            sample_check.check_worker_error(self.loader_id, self.epoch, iterator, exc, self.threads)

    def _per_worker(self) -> dict[str, list[int]]:
        return {} if self.worker_batches is None else {"worker_batches": list(self.worker_batches)}

    def flush(self) -> None:
        self.last_flush = time.perf_counter()
        worker_batches.loader_batches[self.loader_id] = self.batches  # inherited by the next epoch's forked workers
        chunk = self.waits.take()  # hand-overs only where every batch of the chunk was timed
        if chunk is not None:
            chunk.update(self._per_worker())
            emit(EV_BATCHES, loader=self.loader_id, epoch=self.epoch, total=self.batches, **chunk)
        if self.dupes is not None and self.dupes.changed:
            emit(EV_DUPES, loader=self.loader_id, epoch=self.epoch, **self.dupes.summary())


def _count_by_worker(probe: LoaderProbe, original: Any) -> Any:
    """The iterator's _process_data, counting the batch for its worker once torch has accepted it.

    The wrapper lives in the iterator's own __dict__, so it holds the iterator weakly: the bound method would make
    a cycle, and a loop that breaks out of an epoch would leave its workers running until the next garbage
    collection instead of stopping them at once, as torch does without the probe."""
    function, owner = original.__func__, weakref.ref(original.__self__)

    def _process_data(data: Any, worker_id: int, *rest: Any) -> Any:
        result = function(owner(), data, worker_id, *rest)  # raises the worker's error as before, uncounted
        counts = probe.worker_batches
        if counts is not None and 0 <= worker_id < len(counts):
            counts[worker_id] += 1
        return result

    _process_data._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return _process_data


def in_distributed_job() -> bool:
    """Whether this process is one of several ranks (torchrun, Lightning and Slurm launchers set WORLD_SIZE)."""
    try:
        return int(os.environ.get("WORLD_SIZE") or 1) > 1
    except ValueError:
        return False


def _gc_at_fork() -> dict[str, Any]:
    """What the workers' garbage collector inherited: whether it runs, how many objects gc.freeze() already hid,
    and pymalloc's block count, a cheap stand-in for the parent's object count (len(gc.get_objects()) would walk
    and list the whole heap)."""
    return {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(), "blocks": sys.getallocatedblocks()}


def thread_workers(iterator: Any) -> bool:
    """Whether the iterator's workers are threads of this process (torch's worker_method="thread"), known by what
    they are rather than by a torch version's attribute."""
    workers = getattr(iterator, "_workers", None) or []
    return bool(workers) and all(isinstance(w, threading.Thread) for w in workers)
