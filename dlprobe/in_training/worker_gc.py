"""A worker process's full garbage collections, timed.

CPython's collector keeps its bookkeeping in a header inside every object it tracks, so a worker's first full
collection after the fork writes to every such object it inherited from the training process: the kernel copies
each page holding one, a one-time step of the worker's memory (34 MiB per worker for a plain script that imports
torch and numpy) that is neither a leak nor the dataset's copy-on-access growth. Timing the collections lets the
analysis tell that step apart by its mechanism (analysis/findings/gc_copy.py), and name the fix (gc.freeze() before the
workers start).

The callback runs inside the collector, so it only appends two floats to a bounded list: no I/O, no lock (the event
log's lock may be held by the very code the collection interrupted). The batch recorder sends what it holds at its
next flush, off the collector's path.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_WORKER_GC, WORKER_GC_KEPT

OLDEST_GENERATION = 2
_now = time.time
_started: list[float] = [0.0]
_timed: list[list[float]] = []  # [start, stop] of each full collection not sent yet
_kept = [0]  # full collections timed over the worker's life (bounded by WORKER_GC_KEPT)
# Set while a loader starts its workers (hooks._probed_iter): a child forked then times its collections from its
# first instruction. The collector's counts are the parent's at the fork, so a worker's first full collection can
# run before its worker_init_fn (where start_worker installs the callback): 1 run in 4 of numpy_dataset.py on a busy
# machine copied 35 MiB per worker, untimed, before the sampler's first reading.
_armed = [False]


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    """gc.callbacks entry: times the oldest generation's collections, the first WORKER_GC_KEPT of them."""
    if info.get("generation") != OLDEST_GENERATION or _kept[0] >= WORKER_GC_KEPT:
        return
    if phase == "start":
        _started[0] = _now()
    elif phase == "stop":
        _timed.append([_started[0], _now()])
        _kept[0] += 1


def install() -> None:
    """Time this worker process's full collections (as it is forked, and again as it starts: spawn has no fork)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def arm(starting_workers: bool) -> None:
    """Whether a process forked from now on is a loader's worker, to be timed from the fork (os.register_at_fork)."""
    _armed[0] = starting_workers


def _in_forked_child() -> None:
    if _armed[0]:
        _armed[0] = False
        install()


os.register_at_fork(after_in_child=_in_forked_child)


def send(loader_id: int, worker_id: int, pid: int) -> None:
    """Write the collections timed since the last call as one EV_WORKER_GC event (nothing when there are none).
    Once WORKER_GC_KEPT are timed the callback leaves gc.callbacks: it costs ~0.65 us per collection of any
    generation, and is removed here, off the collector's path (removing it from inside a callback would make
    CPython skip the script's own callback after it)."""
    if _kept[0] >= WORKER_GC_KEPT and _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)
    if not _timed:
        return
    taken = _timed[:]
    del _timed[: len(taken)]  # one appended meanwhile stays for the next call
    try:
        log = get_log()
        if log is not None:
            log.emit(EV_WORKER_GC, loader=loader_id, worker=worker_id, pid=pid,
                     collections=[[round(a, 6), round(b, 6)] for a, b in taken])  # fmt: skip
    except Exception as exc:  # never break a worker for a timing
        probe_errors.record("worker_gc.send", exc, f"worker {worker_id}'s garbage collections were not timed")
