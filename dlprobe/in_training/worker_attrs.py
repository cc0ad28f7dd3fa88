"""How many items each of the dataset's attributes holds inside one DataLoader worker, over the worker's life.

A dataset that keeps what `__getitem__` decodes (`self.cache[idx] = sample`) fills one copy of that cache per
worker process, and a worker that is not persistent takes its copy with it when its epoch ends. The memory findings
see the growth (new anonymous memory, not copy-on-write); these counts name the attribute that grew and show whether
each epoch's new workers began it again.

Cheap and bounded by construction: the dataset's data attributes are the summary's own (dataset_inspect.
attribute_values: `vars()` only, wrapped datasets followed a few levels), each counted by the builtin container's
own `__len__` (dict, list, tuple, set, frozenset, deque) or an ndarray's first dimension, called on the C type, so a
subclass's `__len__` (user code) never runs; nothing deeper. Read as the worker starts, then on the batch recorder's
clock (WorkerBatches.add compares one float per batch; a reading is due INTERVAL_S after the last for the first
STEADY_S, then the interval doubles to MAX_INTERVAL_S, so a long run writes tens of events per worker, not thousands)
and as the worker exits (multiprocessing's finalizers; torch's workers never run atexit; a persistent worker is
stopped at the training's exit without them: its last tick is its last reading). An event is written at the start
and the end, and in between only when a count changed. Worker processes only: a thread worker shares the training
process's dataset."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.dataset_inspect import attribute_values
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_WORKER_ATTRS, WORKER_ATTRS_MAX

INTERVAL_S = 1.0  # readings a second apart for the worker's first STEADY_S
# Then the interval doubles after each event, up to MAX_INTERVAL_S. Not sooner: a persistent worker is stopped at
# the training's exit without running its finalizers, so its last tick is its last reading, and a short run's must
# still fall in its last epoch.
STEADY_S = 30.0
MAX_INTERVAL_S = 32.0
_now = time.time  # the batch recorder's clock: WorkerBatches.add compares its batch's end with `due`
# The C types' own __len__, called unbound: a subclass's override (the user's code) is never run.
_LENGTHS: tuple[tuple[type, Any], ...] = (
    (dict, dict.__len__),
    (list, list.__len__),
    (tuple, tuple.__len__),
    (set, set.__len__),
    (frozenset, frozenset.__len__),
    (deque, deque.__len__),
)


def count(value: Any) -> int | None:
    """The number of items a container holds (an ndarray: its first dimension), or None for anything else."""
    for cls, length in _LENGTHS:
        if isinstance(value, cls):
            return int(length(value))
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        shape = np.ndarray.shape.__get__(value)  # the C getter: a subclass's `shape` property is not run
        return int(shape[0]) if shape else None
    return None


def counts(dataset: Any) -> dict[str, int]:
    """{attribute path: items} for the dataset's first WORKER_ATTRS_MAX countable data attributes."""
    out: dict[str, int] = {}
    for path, value in attribute_values(dataset):
        n = count(value)
        if n is not None:
            out[path] = n
            if len(out) >= WORKER_ATTRS_MAX:
                break
    return out


class AttrCounter:
    """One worker process's readings of its dataset's attribute sizes."""

    def __init__(self, dataset: Any, loader_id: int, worker_id: int) -> None:
        self.dataset = dataset
        self.loader_id = loader_id
        self.worker_id = worker_id
        self.interval = INTERVAL_S
        self.started = _now()
        self.due = self.started + self.interval  # compared on every batch: the only per-batch cost
        self.sent: dict[str, int] | None = None
        self.stopped = False

    def read(self, phase: str, batches: int) -> None:
        """Count the attributes and write an event: always at the start and the end, between them (a "tick") only
        where a count changed since the last event."""
        if self.stopped:
            return
        try:
            now = counts(self.dataset)
            if phase == "tick":
                t = _now()
                self.due = t + self.interval
                if now == self.sent:
                    return
                if t - self.started >= STEADY_S:
                    self.interval = min(MAX_INTERVAL_S, self.interval * 2)
            self.sent = now
            log = get_log()
            if log is not None:
                log.emit(EV_WORKER_ATTRS, loader=self.loader_id, worker_id=self.worker_id, phase=phase,
                         batches=batches, attrs=now)  # fmt: skip
        except Exception as exc:  # never break a worker's batch for a count; one failure stops the counting
            self.stopped = True
            self.due = float("inf")
            probe_errors.record(
                "worker_attrs.read", exc, f"worker {self.worker_id}'s dataset attributes are not counted from then on"
            )

    def tick(self, batches: int) -> None:
        self.read("tick", batches)


counter: AttrCounter | None = None


def start(loader_id: int, worker_id: int, fetched: Callable[[], int]) -> AttrCounter | None:
    """In a worker process as it starts (before the script's worker_init_fn): the first reading, and the last one at
    the worker's normal exit, with `fetched()` (the worker's batches so far) as its count of batches."""
    global counter
    try:
        from multiprocessing import util

        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is None:
            return None
        counter = AttrCounter(info.dataset, loader_id, worker_id)
        counter.read("start", 0)
        util.Finalize(None, lambda: counter.read("end", fetched()) if counter else None, exitpriority=10)
    except Exception as exc:
        counter = None
        probe_errors.record("worker_attrs.start", exc, f"worker {worker_id}'s dataset attributes are not counted")
    return counter
