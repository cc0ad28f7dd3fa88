"""Batches a worker's queue could not send. CPython's multiprocessing.Queue pickles what a worker puts on it in a
background thread; where that fails (an object in the batch that does not pickle, such as an h5py handle, or a
tensor whose file descriptor cannot be duplicated at the worker's open-file limit) the thread prints the error on
the worker's stderr and drops the item, and the training loop waits for that batch forever. CPython calls
`Queue._on_queue_feeder_error(exc, item)` for exactly this (its hook for subclasses): in a worker process it also
records the error, the batch's number and the worker as an event, then does what it did before (prints it)."""

from __future__ import annotations

import os
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.batch_info import describe_batch
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_BATCH_SEND_ERROR

MAX_SEND_ERROR_CHARS = 300
_installed = False


def watch_sends(loader_id: int, worker_id: int) -> None:
    """In a worker process, before its first put: record each item its queues fail to send (idempotent)."""
    global _installed
    if _installed:
        return
    import multiprocessing.queues  # here, in the worker: the training process's start-up does not import it for us

    hook = multiprocessing.queues.Queue.__dict__.get("_on_queue_feeder_error")
    if not isinstance(hook, staticmethod):
        raise RuntimeError("this Python's multiprocessing.Queue has no _on_queue_feeder_error hook")
    previous = hook.__func__

    def on_feeder_error(exc: BaseException, item: Any) -> None:
        try:
            _record(loader_id, worker_id, exc, item)
        except Exception as error:  # the item is dropped either way: only the report loses its name
            probe_errors.record("send_errors", error, "a batch the worker could not send is not named")
        previous(exc, item)  # called from here, the traceback it prints is still the queue thread's

    multiprocessing.queues.Queue._on_queue_feeder_error = staticmethod(on_feeder_error)  # type: ignore[attr-defined]
    _installed = True


def _record(loader_id: int, worker_id: int, exc: BaseException, item: Any) -> None:
    log = get_log()
    if log is None:
        return
    # Only what torch's worker puts, (batch number, batch): a queue of the user's in the worker is not a batch. A pipe
    # the training process closed (it ended, or died) is not a batch the queue could not pickle either.
    if not (isinstance(item, tuple) and len(item) == 2 and type(item[0]) is int):
        return
    if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
        return
    task = item[0]
    # What the batch holds and what sharing it sends (its storages: a view's whole one), read only as it fails: a
    # batch /dev/shm had no room for may be views of much larger tensors.
    sizes = describe_batch(item[1])
    log.emit(EV_BATCH_SEND_ERROR, loader=loader_id, worker_id=worker_id, pid=os.getpid(), task=task,
             type=type(exc).__name__, message=str(exc)[:MAX_SEND_ERROR_CHARS], batch_bytes=sizes["bytes"],
             storage_bytes=sizes["storage_bytes"])  # fmt: skip
