"""In-flight recording inside the target: which indices each worker (and the loop) is on, in a slot file.

Workers get the recorder through a picklable wrapper around the loader's worker_init_fn, so it works under
fork, forkserver and spawn alike. The wrapper patches torch's dataset fetchers in the worker process only,
with the same fetch logic, adding one pwrite of the slot per sample and a few per batch (never a shared mapping of
the file, which someone else cutting it short would turn into a SIGBUS in the training). A worker that is a
thread of the training process (torch's `worker_method="thread"`) gets a slot of its own, named by its native
thread id and held thread-locally, so it never writes the training process's slot.

This module owns which slot a process (or worker thread) writes, the worker_init_fn wrapper, the loop's state and the
recording fetchers; the slot itself, its record and its file, is inflight_slot.py.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from dlprobe import atomic
from dlprobe.in_training import (
    fatal_signals,
    probe_errors,
    send_errors,
    tracebacks,
    worker_attrs,
    worker_batches,
    worker_gc,
)
from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.inflight_slot import Slot
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.inflight_format import (
    COLLATE,
    CREATING_ITERATOR,
    DONE,
    ENDED,
    IDLE,
    INIT,
    KIND_GETITEMS,
    KIND_ITERABLE,
    KIND_MAP,
    KIND_UNBATCHED,
    MAX_INDICES,
    OUTSIDE,
    ROLE_MAIN,
    ROLE_THREAD_WORKER,
    ROLE_WORKER,
    WAITING,
    slot_path,
)
from dlprobe.rundir.schema import EV_WORKER_START
from dlprobe.system.procmem import read_smaps_rollup

# faulthandler dumps every thread's Python stack on this signal: the fallback when py-spy cannot attach.
# A real-time signal, because the script may well use SIGUSR1/SIGUSR2 itself.
DUMP_SIGNAL = signal.SIGRTMIN + 5

_now = time.time  # bound once, as in inflight_slot.py: the fetch path is a handful of C calls


_slot: Slot | None = None


class _ThreadWorker(threading.local):
    """A worker thread's own slot: the process-wide _slot is the training loop's (or a worker process's)."""

    worker = False
    slot: Slot | None = None


_thread = _ThreadWorker()
# Set once a worker thread starts: until then a fetch reads the process's slot as before, without the thread-local
# lookup (it costs about 0.2 us per batch, a noticeable share of the hooks' ~11 us).
_thread_workers_started = False
_run_dir: str | None = None
_dump_file: Any = None
_patched = False


def _forget_in_child() -> None:
    # A forked child (a worker before its init, or the script's own processes) must not write the parent's slot.
    global _slot, _dump_file
    if _slot is not None:
        with contextlib.suppress(OSError):
            os.close(_slot.fd)  # the parent's descriptor, inherited: the child never writes it
    _slot = None
    _dump_file = None


def _register_dump_signal(run_dir: str, slot: Slot) -> None:
    global _dump_file
    files = RunDir(run_dir)
    files.stacks_dir.mkdir(parents=True, exist_ok=True)
    _dump_file = open(atomic.append_fd(files.faulthandler), "a")  # noqa: SIM115 - kept open for the handler
    faulthandler.register(DUMP_SIGNAL, file=_dump_file, all_threads=True, chain=False)
    slot.set_faulthandler_signal(int(DUMP_SIGNAL))


def start_main(run_dir: str) -> None:
    """The training process's slot (the loop's state, and fetches of loaders without workers)."""
    global _slot, _run_dir
    _run_dir = run_dir
    try:
        _slot = Slot(slot_path(run_dir, os.getpid()), ROLE_MAIN)
        os.register_at_fork(after_in_child=_forget_in_child)
        atexit.register(_check_at_exit)  # a file cut after the loop's last check is still told
    except Exception as exc:  # the probe loses the in-flight view, never the training
        _slot = None
        probe_errors.record(
            "inflight.main",
            exc,
            "the training process has no in-flight record: --hang-timeout cannot see the loop waiting for a "
            "batch, and hang or crash reports of loaders without workers lack the indices",
        )
        return
    try:
        _register_dump_signal(run_dir, _slot)
    except Exception as exc:
        probe_errors.record(
            "inflight.faulthandler", exc, "no faulthandler stack dump of the training process when py-spy is refused"
        )


def start_worker(run_dir: str, loader_id: int, worker_id: int) -> None:
    global _slot
    _slot = Slot(slot_path(run_dir, os.getpid()), ROLE_WORKER, loader_id, worker_id)
    try:
        _register_dump_signal(run_dir, _slot)
    except Exception as exc:
        probe_errors.record(
            "inflight.faulthandler",
            exc,
            f"no faulthandler stack dump of worker {worker_id} (loader {loader_id}) when py-spy is refused",
        )
    try:
        fatal_signals.record_in_worker(run_dir)
    except Exception as exc:
        probe_errors.record(
            "inflight.fatal_signals",
            exc,
            f"no fatal-signal record of worker {worker_id} (loader {loader_id}): if it crashes, only torch's message "
            "can say how",
        )
    patch_fetchers()
    slot = _slot
    slot.recorder = worker_batches.start(loader_id, worker_id)
    if slot.recorder is not None:
        slot.recorder.attrs = worker_attrs.start(loader_id, worker_id, lambda: slot.fetches)
    try:
        worker_gc.install()  # sent with the batches (worker_batches.flush): a copy at its first full collection
    except Exception as exc:
        probe_errors.record("worker_gc.install", exc, f"worker {worker_id}'s garbage collections are not timed")
    try:
        from multiprocessing import util

        # a last look at exit: a file cut after the worker's last check is still told (finalizers run there; torch's
        # workers never run atexit)
        util.Finalize(None, _check_at_exit, exitpriority=11)
    except Exception as exc:
        probe_errors.record("inflight.exit_check", exc, f"worker {worker_id}'s slot file is not checked at its exit")


def _check_at_exit() -> None:
    slot = _slot
    if slot is not None:
        slot.check(_now())


def start_thread_worker(run_dir: str, loader_id: int, worker_id: int) -> None:
    """A worker that is a thread of this process: its own slot, file named by its native thread id. No signal of
    its own: faulthandler's handler is process-wide, and the training process's dumps every thread already."""
    global _thread_workers_started
    _thread_workers_started = True
    _thread.worker = True  # from here on this thread's fetches never fall back to the process's slot
    tid = threading.get_native_id()
    slot = Slot(slot_path(run_dir, tid), ROLE_THREAD_WORKER, loader_id, worker_id)
    _thread.slot = slot
    patch_fetchers()
    slot.recorder = worker_batches.start_thread(loader_id, worker_id, tid)


def _current_slot() -> Slot | None:
    """The slot this fetch writes: a worker thread's own, else the process's (a worker process, or the loop's)."""
    local = _thread
    return local.slot if local.worker else _slot


class InflightInit:
    """Stands in for the loader's worker_init_fn while the workers start: sets up the worker's slot and
    fetch recording, then calls the user's function (if any) exactly as the DataLoader would have."""

    def __init__(self, user_fn: Callable[[int], Any] | None, run_dir: str, loader_id: int) -> None:
        self.user_fn = user_fn
        self.run_dir = run_dir
        self.loader_id = loader_id
        # Where the loader was iterated: a worker called in this same process is a thread (worker_method="thread"),
        # whatever the torch version calls it; a worker process (fork, spawn, forkserver) has a pid of its own.
        self.owner_pid = os.getpid()

    def __call__(self, worker_id: int) -> None:
        try:
            tracebacks.patch_exception_wrapper()
        except Exception as exc:
            probe_errors.record(
                "tracebacks.worker", exc, f"tracebacks from worker {worker_id} may show dlprobe's fetch frames"
            )
        in_thread = os.getpid() == getattr(self, "owner_pid", None)
        try:
            if in_thread:
                start_thread_worker(self.run_dir, self.loader_id, worker_id)
            else:
                start_worker(self.run_dir, self.loader_id, worker_id)
        except Exception as exc:
            probe_errors.record(
                "inflight.worker",
                exc,
                f"the in-flight recorder of worker {worker_id} (loader {self.loader_id}) failed; hang and crash "
                "reports for it lack the indices",
            )
        if not in_thread:
            _read_own_start(self.loader_id, worker_id)
            try:
                send_errors.watch_sends(self.loader_id, worker_id)
            except Exception as exc:
                probe_errors.record(
                    "send_errors.install", exc, f"a batch worker {worker_id} cannot send is not named by its error"
                )
        slot = _current_slot()
        if self.user_fn is None:
            return
        if slot is not None:
            slot.set_phase(INIT)
        self.user_fn(worker_id)
        if slot is not None:
            slot.set_phase(IDLE)


def _read_own_start(loader_id: int, worker_id: int) -> None:
    """This worker's memory before the user's worker_init_fn runs (EV_WORKER_START): the start its growth is measured
    from, which the main process's reading after iter() can miss on a busy machine (a table loaded by then)."""
    try:
        log = get_log()
        if log is not None:
            pid = os.getpid()
            log.emit(EV_WORKER_START, loader=loader_id, worker_id=worker_id, pid=pid, memory=read_smaps_rollup(pid))
    except Exception as exc:  # never break a worker for a reading
        probe_errors.record("inflight.worker_start", exc, f"worker {worker_id}'s memory at its start was not read")


_NOT_SWAPPED = object()


def wrap_worker_init(loader: Any, loader_id: int) -> Any:
    """Swap the loader's worker_init_fn for the recording wrapper; returns what restore_worker_init puts back."""
    if _run_dir is None or not getattr(loader, "num_workers", 0):
        return _NOT_SWAPPED
    try:
        original = loader.worker_init_fn
        loader.worker_init_fn = InflightInit(original, _run_dir, loader_id)
    except Exception as exc:  # a subclass with a read-only worker_init_fn: no in-flight records, same training
        probe_errors.record(
            "inflight.worker_init",
            exc,
            f"loader {loader_id}'s worker_init_fn could not be wrapped: its workers have no in-flight records, so "
            "hang and crash reports for them lack the indices",
        )
        return _NOT_SWAPPED
    return original


def restore_worker_init(loader: Any, original: Any) -> None:
    if original is not _NOT_SWAPPED:
        loader.worker_init_fn = original


def loop_creating_iterator(loader_id: int) -> None:
    if _slot is not None:
        _slot.loop(CREATING_ITERATOR, loader_id)


def loop_waiting(loader_id: int, iterator: Any, batches: int) -> None:
    slot = _slot
    if slot is None:
        return
    worker = task = -1
    info = getattr(iterator, "_task_info", None)
    if info is not None:
        task = getattr(iterator, "_rcvd_idx", -1)
        entry = info.get(task)
        if entry is not None and len(entry) == 1:  # (worker_id,) until the batch arrives, then (worker_id, data)
            worker = entry[0]
    slot.loop(WAITING, loader_id, worker, task, batches)


def loop_outside(loader_id: int, batches: int) -> None:
    if _slot is not None:
        _slot.loop(OUTSIDE, loader_id, -1, -1, batches)


# --- the fetchers, with the same logic as torch.utils.data._utils.fetch, plus the records -----------------


def _map_fetch(self: Any, possibly_batched_index: Any) -> Any:
    slot = _current_slot() if _thread_workers_started else _slot
    if slot is None:
        return _original_fetch["map"](self, possibly_batched_index)
    recorder = slot.recorder  # None outside a worker: the loop's own fetches are its waits
    if recorder is not None:
        recorder.begin()
    if self.auto_collation:
        if hasattr(self.dataset, "__getitems__") and self.dataset.__getitems__:
            slot.begin(KIND_GETITEMS, possibly_batched_index)
            try:
                data = self.dataset.__getitems__(possibly_batched_index)
            except Exception:
                _find_failing_index(self.dataset, possibly_batched_index, slot)
                raise  # the user's exception, unchanged
        else:
            recorded = slot.begin(KIND_MAP, possibly_batched_index)  # the first sample's record too, if known
            dataset = self.dataset
            sample = slot.sample
            data = []
            for pos, idx in enumerate(possibly_batched_index):
                if pos or not recorded:
                    sample(pos, idx)
                data.append(dataset[idx])
    else:
        slot.begin(KIND_UNBATCHED, (possibly_batched_index,))
        data = self.dataset[possibly_batched_index]
    slot.set_phase(COLLATE)
    collate = 0.0
    if recorder is not None:
        collate = _now()
        recorder.collating()
    batch = self.collate_fn(data)
    if recorder is not None:  # a worker's: DONE goes out with the batch's row (keep_recent)
        recorder.add(slot, slot.fetches, slot.t_begin, collate, _now(), slot.first)
    else:
        slot.set_phase(DONE)
    return batch


def _find_failing_index(dataset: Any, indices: Any, slot: Slot) -> None:
    """A batched fetch raised: fetch its indices again one at a time to name the one that raises.

    Only on this error path, and only the probe sees these fetches; if none raises alone (the batch as a whole
    is at fault) the slot names no index, and the report lists the batch's indices instead.
    """
    try:
        candidates = list(indices)[:MAX_INDICES] if hasattr(indices, "__len__") else []
    except Exception as exc:
        probe_errors.record("inflight.getitems", exc, "the index that raised in a batched fetch is not named")
        return
    for pos, idx in enumerate(candidates):
        try:
            dataset.__getitems__([idx])
        except Exception:
            slot.sample(pos, idx)
            return


def _iterable_fetch(self: Any, possibly_batched_index: Any) -> Any:
    slot = _current_slot() if _thread_workers_started else _slot
    if slot is None:
        return _original_fetch["iterable"](self, possibly_batched_index)
    if self.ended:
        raise StopIteration
    recorder = slot.recorder  # None outside a worker: the loop's own fetches are its waits
    if recorder is not None:
        recorder.begin()
    start = getattr(self, "_dlprobe_pos", 0)  # position in this worker's stream
    if self.auto_collation:
        slot.begin(KIND_ITERABLE, possibly_batched_index, start)  # with the first position's record
        data = []
        for pos, _ in enumerate(possibly_batched_index):
            if pos:
                slot.sample(pos, start + pos)
            try:
                data.append(next(self.dataset_iter))
            except StopIteration:
                self.ended = True
                break
        self._dlprobe_pos = start + len(data)
        if self.ended:
            slot.set_batch_len(len(data))  # the stream ran out inside this batch
        if len(data) == 0 or (self.drop_last and len(data) < len(possibly_batched_index)):
            slot.set_phase(ENDED)
            raise StopIteration
    else:
        slot.begin(KIND_ITERABLE, None, start)  # with the position's record
        try:
            data = next(self.dataset_iter)
        except StopIteration:
            slot.set_phase(ENDED)
            raise
        self._dlprobe_pos = start + 1
    slot.set_phase(COLLATE)
    collate = 0.0
    if recorder is not None:
        collate = _now()
        recorder.collating()
    batch = self.collate_fn(data)
    if recorder is not None:  # a worker's: DONE goes out with the batch's row (keep_recent)
        recorder.add(slot, slot.fetches, slot.t_begin, collate, _now(), slot.first)
    else:
        slot.set_phase(DONE)
    return batch


_original_fetch: dict[str, Callable[..., Any]] = {}


def patch_fetchers() -> None:
    """Route this process's dataset fetches through the recording versions (idempotent)."""
    global _patched
    if _patched:
        return
    from torch.utils.data._utils import fetch

    _original_fetch["map"] = fetch._MapDatasetFetcher.fetch
    _original_fetch["iterable"] = fetch._IterableDatasetFetcher.fetch
    fetch._MapDatasetFetcher.fetch = _map_fetch  # type: ignore[method-assign]
    fetch._IterableDatasetFetcher.fetch = _iterable_fetch  # type: ignore[method-assign]
    _patched = True
