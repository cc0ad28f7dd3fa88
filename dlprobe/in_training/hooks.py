"""Hooks on torch's DataLoader: loader config, worker pids, and how long the loop waits for each batch."""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import importlib.machinery
import os
import sys
import threading
import time
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from dlprobe.in_training import (
    detached,
    elastic_error,
    fork_handles,
    identity,
    inflight,
    probe_errors,
    quiet_fork,
    rng_streams,
    runtime_state,
    sample_check,
    sample_order,
    script_errors,
    start_method_choice,
    startup_profile,
    worker_batches,
    worker_gc,
)
from dlprobe.in_training.batch_info import describe_batch
from dlprobe.in_training.dataset_inspect import summarize_dataset
from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.hand_over import HandOverClock, attach_to
from dlprobe.in_training.loop_clock import LoopClock
from dlprobe.in_training.run_limits import LIMITS
from dlprobe.in_training.sample_hashes import ROW_BYTES, SKETCH_ROW_BYTES, DuplicateCounter
from dlprobe.in_training.wait_fold import WaitFolder
from dlprobe.redact import redact_text
from dlprobe.rundir.schema import (
    EV_ACCEL,
    EV_BATCH_INFO,
    EV_BATCHES,
    EV_DUPES,
    EV_EPOCH,
    EV_EPOCH_END,
    EV_FORK_HANDLES,
    EV_FORK_STATE,
    EV_LOADER,
    EV_LOADER_ERROR,
    EV_SAMPLE_ORDER,
    EV_START_METHOD,
    EV_START_METHOD_FORCED,
    EV_START_READINESS,
    EV_START_READINESS_SKIPPED,
    EV_TAKEOVER,
    EV_TUNE_LOOP,
    EV_WORKER_START_FAILED,
    EV_WORKERS_LAST,
    FOLDED_FLUSH_S,
    RUN_DIR_ENV,
    TAKEOVER_ENV,
    TAKEOVER_LOADER_ENV,
    TAKEOVER_STEPS_ENV,
    WORKER_START_MAIN_GUARD,
    WORKER_START_UNPICKLABLE,
)
from dlprobe.system.procmem import read_smaps_rollup

if TYPE_CHECKING:
    import importlib.abc

DATALOADER_MODULE = "torch.utils.data.dataloader"
# Commands that need the script's DataLoader but not its training (scan, tune) set these: when loader N is first
# iterated, the named function "package.module:function" gets the DataLoader, and its int result ends the script.
# With TAKEOVER_STEPS_ENV (tune), the script's loop first runs that many steps over it, timed (loop_clock.py).
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
                _in_distributed_job(),
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
        _emit(EV_EPOCH, loader=self.loader_id, epoch=self.epoch, iter_s=round(iter_s, 6), workers=workers, gc=gc_state)
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
        _emit(
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
            _emit(EV_BATCH_INFO, loader=self.loader_id, epoch=self.epoch, **describe_batch(batch))
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
            _emit(EV_WORKERS_LAST, loader=self.loader_id, epoch=self.epoch, workers=readings)
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
            _emit(EV_EPOCH_END, loader=self.loader_id, epoch=self.epoch, batches=self.batches, **self._per_worker())
            order = sample_order.take(self.epoch_iterator and self.epoch_iterator())
            if order is not None:
                _emit(EV_SAMPLE_ORDER, loader=self.loader_id, epoch=self.epoch, **order)

    def record_error(self, exc: BaseException, iterator: Any = None) -> None:
        self.flush()
        cause = exc.__cause__
        _emit(
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
            _emit(EV_BATCHES, loader=self.loader_id, epoch=self.epoch, total=self.batches, **chunk)
        if self.dupes is not None and self.dupes.changed:
            _emit(EV_DUPES, loader=self.loader_id, epoch=self.epoch, **self.dupes.summary())


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


_probes: weakref.WeakKeyDictionary[Any, LoaderProbe] = weakref.WeakKeyDictionary()
_iterators: weakref.WeakKeyDictionary[Any, LoaderProbe] = weakref.WeakKeyDictionary()
_all_probes: list[LoaderProbe] = []
_created: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def _in_distributed_job() -> bool:
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


def _emit(ev: str, **fields: Any) -> None:
    log = get_log()
    if log is not None:
        log.emit(ev, **fields)


def _loader_config(loader: Any, loader_id: int) -> dict[str, Any]:
    ctx = loader.multiprocessing_context
    return {
        "loader": loader_id,
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "start_method": ctx.get_start_method() if ctx is not None else None,
        "pin_memory": bool(loader.pin_memory),
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": bool(loader.persistent_workers),
        # torch's main branch: "multiprocessing" or "thread"; None where the installed torch has no such setting.
        "worker_method": getattr(loader, "worker_method", None),
        "timeout": loader.timeout,
        "drop_last": bool(loader.drop_last),
        "collate_fn": getattr(loader.collate_fn, "__qualname__", type(loader.collate_fn).__name__),
        "custom_batch_sampler": loader.batch_sampler is not None and loader.batch_size is None,
        # An index outside range(len(dataset)) is the sampler's: the report names its class
        "sampler": _class_name(getattr(loader, "sampler", None)),
        "batch_sampler": _class_name(getattr(loader, "batch_sampler", None)),
        "created_t": _created.get(loader),
        "dataset": _dataset_summary(loader, loader_id),
    }


def _class_name(obj: Any) -> str | None:
    if obj is None:
        return None
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ in ("__main__", "builtins") else f"{cls.__module__}.{cls.__qualname__}"


def _dataset_summary(loader: Any, loader_id: int) -> dict[str, Any]:
    """The dataset's summary apart from the loader's settings: an odd dataset must not cost num_workers & co."""
    try:
        return summarize_dataset(loader.dataset)
    except Exception as exc:  # inspection must never break training
        probe_errors.record("hooks.dataset_summary", exc, f"loader {loader_id}'s dataset summary is missing")
        cls = type(loader.dataset)
        return {"type": f"{cls.__module__}.{cls.__qualname__}"}


def _probe_for(loader: Any) -> LoaderProbe:
    probe = _probes.get(loader)
    if probe is None:
        probe = LoaderProbe(len(_all_probes))
        _probes[loader] = probe
        _all_probes.append(probe)
        # _DatasetKind.Iterable == 1; in a distributed job every loader's samples are sketched, so that the
        # report can tell ranks that read the same samples (no DistributedSampler) apart.
        probe.iterable = bool(getattr(loader, "_dataset_kind", 0))
        probe.hash_samples = probe.iterable or _in_distributed_job()
        identity.emit_if_changed()  # who wrote the loader comes before the loader: rank, node, host
        try:
            _emit(EV_LOADER, **_loader_config(loader, probe.loader_id))
        except Exception as exc:  # inspection must never break training
            _emit(EV_LOADER, loader=probe.loader_id, inspect_error=repr(exc))
            probe_errors.record(
                "hooks.loader_config", exc, f"loader {probe.loader_id}'s settings and dataset summary are missing"
            )
    return probe


def thread_workers(iterator: Any) -> bool:
    """Whether the iterator's workers are threads of this process (torch's worker_method="thread"), known by what
    they are rather than by a torch version's attribute."""
    workers = getattr(iterator, "_workers", None) or []
    return bool(workers) and all(isinstance(w, threading.Thread) for w in workers)


def _start_method_of(loader: Any, iterator: Any) -> str | None:
    """The start method the workers really used (asked only once they exist, so nothing gets pinned)."""
    if not getattr(iterator, "_workers", None):
        return None
    if thread_workers(iterator):
        return "thread"  # no process started: multiprocessing's method says nothing about these workers
    ctx = loader.multiprocessing_context
    if ctx is not None:
        return str(ctx.get_start_method())
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True)


def _wrap_init(original_init: Any) -> Any:
    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _created.setdefault(self, time.time())
        _start_main_process()  # a process probed through sitecustomize becomes a training process here
        startup_profile.mark_loader_created()
        original_init(self, *args, **kwargs)

    __init__._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return __init__


# Re-entry guards: a subclass's __iter__/__next__ that calls the base one must be probed once, by the outermost.
_inside = threading.local()


def _wrap_iter(original_iter: Any) -> Any:
    """DataLoader.__iter__ (or a subclass's own): config, epochs, worker pids; the iterator is unchanged."""

    @functools.wraps(original_iter)
    def __iter__(self: Any) -> Any:
        if getattr(_inside, "iter", False):
            return original_iter(self)
        _inside.iter = True
        try:
            return _probed_iter(self, original_iter)
        finally:
            _inside.iter = False

    __iter__._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return __iter__


def _emit_fork_handles(loader: Any, loader_id: int, epoch: int) -> None:
    """The files and sockets the dataset's objects hold as the workers fork (shared-handle reads them)."""
    try:
        found = fork_handles.dataset_handles(loader.dataset)
    except Exception as exc:  # an exotic dataset must never break the user's training
        probe_errors.record("hooks.fork_handles", exc, "the descriptors the dataset hands its workers are not known")
        return
    if found["handles"] or found["mapped"] or found["pools"]:
        _emit(EV_FORK_HANDLES, loader=loader_id, epoch=epoch, **found)


def _bootstrapping() -> bool:
    """A spawn/forkserver worker still importing the script: multiprocessing refuses to start processes here."""
    mp = sys.modules.get("multiprocessing")
    return bool(mp is not None and getattr(mp.current_process(), "_inheriting", False))


def _record_main_guard(loader: Any, exc: BaseException) -> None:
    """This process is a worker re-running the script, whose top level iterates a loader with workers."""
    from dlprobe.in_training.start_failures import script_frame

    file, line = script_frame()
    _emit(
        EV_WORKER_START_FAILED,
        loader=len(_all_probes),  # the script builds its loaders in the same order in every process
        start_method=start_method_choice.current_method(loader),
        kind=WORKER_START_MAIN_GUARD,
        error=f"{type(exc).__name__}: {redact_text(str(exc))[:300]}",
        file=file,
        line=line,
    )
    flush_all()


def _record_unpicklable(loader: Any, loader_id: int, exc: BaseException) -> None:
    """iter() raised before the workers ran under spawn/forkserver: name what pickle refuses (only on this path)."""
    method = start_method_choice.current_method(loader)
    if loader.num_workers <= 0 or method not in ("spawn", "forkserver"):
        return
    from dlprobe.in_training.start_failures import blame, worker_roots

    try:
        found = blame(worker_roots(loader, loader.worker_init_fn))
    except Exception as walk_exc:  # the walk must never replace the script's own error
        probe_errors.record("hooks.pickle_blame", walk_exc, "the object pickle refused is not named")
        return
    if found is None:
        return  # everything pickles: the failure was something else, the script's error says what
    _emit(
        EV_WORKER_START_FAILED,
        loader=loader_id,
        start_method=method,
        kind=WORKER_START_UNPICKLABLE,
        error=f"{type(exc).__name__}: {redact_text(str(exc))[:300]}",
        path=found.path,
        object_type=found.object_type,
        reason=found.reason,
    )


def _emit_start_readiness(loader: Any, loader_id: int) -> None:
    """Once per loader, before its first workers start: what forkserver and spawn would make of it (bounded; nothing
    is changed). Not in a multiprocessing child."""
    if not loader.num_workers or getattr(loader, "worker_method", None) == "thread" or _taking_over:
        return  # scan and tune (a take-over) build loaders of their own, trial after trial: none is reported on
    if os.environ.get(TAKEOVER_ENV):
        return  # the loader about to be taken over
    try:
        import multiprocessing

        # A forkserver or spawn worker imports the script again (as __mp_main__, before it knows its parent): a loop
        # outside the guard reaches here in the worker too, where there is nothing to predict.
        main = sys.modules.get("__main__")
        if (
            multiprocessing.parent_process() is not None
            or _bootstrapping()
            or getattr(main, "__name__", "") == "__mp_main__"
        ):
            return
        from dlprobe.in_training import isolated, start_readiness  # here: pickle and ast stay off the start-up

        # No copy where the script would see it or where it could get the training killed (in_training/quiet_fork.py)
        refused = quiet_fork.blocker() or quiet_fork.headroom_blocker(quiet_fork.anon_resident_bytes())
        if refused is not None:
            _emit(EV_START_READINESS_SKIPPED, loader=loader_id, reason=refused)
            return
        # In a forked copy of this process: the pickler's memo and the walk's containers (hundreds of MiB for a big
        # dataset), the collections they set off and whatever a user object does when pickled stay out of the
        # training, whose workers are forked right after with the memory they would have had unprobed. The copy is
        # detached (in_training/detached.py): the training goes on to fork its workers at once, never waiting for
        # the pickling (up to CHILD_TIMEOUT_S; a copy blocked on a lock held at the fork was a second of the training's)
        cpu_share = start_readiness.cpu_share()  # this process's share of a core, not the copy's
        owner = os.getpid()

        def check_in_copy() -> None:
            found, missing = isolated.run_in_child(
                lambda: start_readiness.readiness(loader, loader.worker_init_fn), start_readiness.CHILD_TIMEOUT_S
            )
            if found is None:
                _emit(EV_START_READINESS_SKIPPED, loader=loader_id, reason=missing, pid=owner)
            else:
                _emit(EV_START_READINESS, loader=loader_id, **{**found, "cpu_share": cpu_share}, pid=owner)

        detached.start(check_in_copy, start_readiness.CHILD_TIMEOUT_S)
    except Exception as exc:  # an exotic dataset must never break the user's training
        probe_errors.record("hooks.start_readiness", exc, f"loader {loader_id}'s start-method readiness is missing")


def _probed_iter(self: Any, original_iter: Any) -> Any:
    startup_profile.stop("iter")  # before any worker is forked
    # Before anything else: a worker re-running the script (spawn, forkserver) must get the forced method too, as
    # it would get Python 3.14's default, and meet the same "bootstrapping phase" error.
    forced = start_method_choice.apply(self)
    if self.num_workers > 0 and _bootstrapping():
        try:
            return original_iter(self)  # raises multiprocessing's "bootstrapping phase" error, as it would unprobed
        except RuntimeError as exc:
            if "bootstrapping phase" in str(exc):  # multiprocessing's own words (_check_not_importing_main)
                _record_main_guard(self, exc)
            raise
    if _ended_with is not None:  # the script caught the take-over's SystemExit and went on: it must not train
        raise SystemExit(_ended_with)
    if _deferred is not None and not (_deferred.loader is self and _deferred.new_pass()):
        # The loop being timed moved on to another loader (Lightning's sanity check, then training), or its passes
        # over this one are too short to time: the take-over happens now, never after the whole training.
        _take_over_deferred(_deferred.iterator)
    probe = _probe_for(self)
    if forced is not None:
        _emit(EV_START_METHOD_FORCED, loader=probe.loader_id, **forced)
    if probe.epoch < 0:
        _maybe_take_over(self, probe.loader_id)
    previous = getattr(self, "_iterator", None)
    if probe.epoch < 0 and previous is None:
        _emit_start_readiness(self, probe.loader_id)
    inflight.loop_creating_iterator(probe.loader_id)
    user_init = inflight.wrap_worker_init(self, probe.loader_id)
    threads = getattr(self, "worker_method", None) == "thread"  # nothing is forked for thread workers
    rng_init = rng_streams.NOT_SWAPPED
    if self.num_workers > 0 and not threads and (previous is None or not self.persistent_workers):
        # Threads, OpenMP and CUDA state right before the fork: a thread holding a lock now leaves it
        # locked forever in every worker (hang causes and the fork-hazard finding read this).
        _emit(EV_FORK_STATE, loader=probe.loader_id, epoch=probe.epoch + 1, **runtime_state.fork_snapshot())
        _emit_fork_handles(self, probe.loader_id, probe.epoch + 1)
        rng_init = rng_streams.wrap_worker_init(self, probe.loader_id, probe.epoch + 1)  # the dataset's generators
    start = time.perf_counter()
    worker_gc.arm(self.num_workers > 0 and not threads)  # its workers' collections timed from their fork
    try:
        iterator = original_iter(self)
    except Exception as exc:
        rng_streams.restore_worker_init(self, rng_init)
        inflight.restore_worker_init(self, user_init)
        _record_unpicklable(self, probe.loader_id, exc)
        raise
    finally:
        worker_gc.arm(False)
        rng_streams.restore_worker_init(self, rng_init)
        inflight.restore_worker_init(self, user_init)  # the wrapper only travels to the workers as they start
        inflight.loop_outside(probe.loader_id, probe.batches)
    new_iterator = iterator is not previous
    if new_iterator and probe.epoch < 0:
        method = _start_method_of(self, iterator)
        if method:
            _emit(EV_START_METHOD, loader=probe.loader_id, start_method=method)
    probe.begin_epoch(iterator, new_iterator, time.perf_counter() - start)
    try:
        sample_order.begin(iterator, self)
    except Exception as exc:  # never break training for the sampler's facts
        probe_errors.record("hooks.sample_order", exc, f"loader {probe.loader_id}'s sampler is not named")
    if _is_loader_iterator(iterator):
        _iterators[iterator] = probe
    return iterator


def _is_loader_iterator(iterator: Any) -> bool:
    # Known by what it does: torch's iterator protocol (an index sampler feeding fetches), whatever the class.
    return hasattr(iterator, "_sampler_iter") and hasattr(iterator, "_next_data")


def _wrap_next(original_next: Any) -> Any:
    """An iterator's __next__: how long the loop waits for each batch, and errors raised to the loop."""

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        probe = _iterators.get(self)
        if probe is None or getattr(_inside, "next", False):
            return original_next(self)
        _inside.next = True
        try:
            return _probed_next(self, probe, original_next)
        finally:
            _inside.next = False

    __next__._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return __next__


def _probed_next(self: Any, probe: LoaderProbe, original_next: Any) -> Any:
    if LIMITS.active:  # `dlprobe check` bounds the run: stop before fetching one batch too many
        LIMITS.enforce(sum(p.batches for p in _all_probes))
    if _ended_with is not None:  # the script caught the take-over's SystemExit and went on: it must not train
        raise SystemExit(_ended_with)
    clock = _deferred if _deferred is not None and _deferred.loader_id == probe.loader_id else None
    if clock is not None:
        clock.asking()
        if clock.done():
            _take_over_deferred(self)
    inflight.loop_waiting(probe.loader_id, self, probe.batches)
    start = time.perf_counter()
    try:
        batch = original_next(self)
    except StopIteration:
        probe.end_epoch()  # a loop still timed goes on timing in its next pass (new_pass)
        raise
    except BaseException as exc:
        # The batch will not come: the loop is out of its wait while the probe checks the sample (up to its limit),
        # so the hang watch never reads the probe's own check as a stalled loop (and --on-hang stop never ends it).
        inflight.loop_outside(probe.loader_id, probe.batches)
        probe.record_error(exc, self)
        raise
    finally:
        inflight.loop_outside(probe.loader_id, probe.batches)
    probe.record_batch(time.perf_counter() - start, batch)
    if clock is not None:
        clock.returned(self)
    if probe.batches == 2:  # by now the loop has had one step to move a batch to a device
        _emit(EV_ACCEL, loader=probe.loader_id, **runtime_state.accel_state(self))
    return batch


def _wrap_shutdown(original_shutdown: Any) -> Any:
    """An iterator's _shutdown_workers (its end, or its __del__ when the loop left the epoch): the workers are read
    once more first if the epoch was left before its last batch."""

    @functools.wraps(original_shutdown)
    def _shutdown_workers(self: Any) -> Any:
        try:
            _read_stopping_workers(self)
        except Exception:  # noqa: S110 - at interpreter exit even the recording may fail: stopping the workers first
            pass
        return original_shutdown(self)

    _shutdown_workers._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return _shutdown_workers


def _read_stopping_workers(iterator: Any) -> None:
    """Not when the epoch ran out (torch stops the workers inside __next__, before its StopIteration: they are done,
    often gone), not at interpreter exit (torch leaves them to multiprocessing then), not in a take-over (tune reads
    its trials' workers itself), and not from the garbage collector (the iterator's weak references are cleared by
    then: no probe is found)."""
    if getattr(_inside, "next", False) or os.environ.get(TAKEOVER_ENV) or _python_exiting():
        return
    probe = _iterators.get(iterator)
    if probe is not None:
        try:
            probe.read_workers_stopping(iterator)
        except Exception as exc:  # never stand in the way of stopping workers
            probe_errors.record("hooks.workers_last", exc, f"loader {probe.loader_id}'s stopping workers unread")


def _python_exiting() -> bool:
    """torch's own flag, set by its atexit handler: from then on its _shutdown_workers leaves the workers alone."""
    utils = sys.modules.get("torch.utils.data._utils")
    return utils is None or getattr(utils, "python_exit_status", False) is not False


def _wrap_own(cls: type, name: str, wrap: Any) -> None:
    """Wrap `name` where `cls` defines it itself (subclasses that only inherit it get the base's wrapper)."""
    own = cls.__dict__.get(name)
    if own is not None and callable(own) and not getattr(own, "_dlprobe_wrapper", False):
        setattr(cls, name, wrap(own))


def _patch_family(base: type, name: str, wrap: Any) -> None:
    """Wrap `name` on `base`, on every subclass already defined, and on every subclass defined later.

    torchdata's StatefulDataLoader, for one, has its own __iter__ and iterator classes with their own __next__:
    a loader is a loader by what it does, not by being exactly torch's class.
    """
    todo = [base]
    while todo:
        cls = todo.pop()
        _wrap_own(cls, name, wrap)
        todo.extend(cls.__subclasses__())
    previous = base.__dict__.get("__init_subclass__")
    inherited = previous.__func__ if isinstance(previous, classmethod) else None

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if inherited is not None:
            inherited(cls, **kwargs)
        else:
            super(cast(Any, base), cls).__init_subclass__(**kwargs)
        _wrap_own(cls, name, wrap)

    base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment,arg-type]


def patch_dataloader(module: ModuleType) -> None:
    """Wrap DataLoader.__iter__ and the iterators' __next__ (subclasses too); behaviour and results are unchanged."""
    loader_cls = module.DataLoader
    base_iter_cls = module._BaseDataLoaderIter
    if getattr(loader_cls, "_dlprobe_patched", False):
        return
    runtime_state.record_baseline()
    _patch_family(loader_cls, "__init__", _wrap_init)  # StatefulDataLoader's __init__ never calls DataLoader's
    _patch_family(loader_cls, "__iter__", _wrap_iter)
    _patch_family(base_iter_cls, "__next__", _wrap_next)
    _patch_family(base_iter_cls, "_shutdown_workers", _wrap_shutdown)
    _patch_family(base_iter_cls, "_next_index", sample_order.wrap_next_index)  # each epoch's order, one hash
    loader_cls._dlprobe_patched = True
    _register_atexit()
    elastic_error.remember_baseline()  # a torchrun rank: OOM kills from now on are its workers' to explain
    if script_errors.launched_rank():  # an error before its first DataLoader is a rank's failure too
        script_errors.watch_uncaught(ended_by_exception)
    try:  # loaders without workers fetch in this process: record those too
        inflight.patch_fetchers()
    except Exception as exc:
        probe_errors.record(
            "inflight.fetchers", exc, "fetches in the training process (num_workers=0) have no in-flight indices"
        )


_deferred: LoopClock | None = None  # the loop being timed before its loader is taken over
_loop_timed: dict[str, Any] | None = None  # what it timed (loop_clock.LoopClock.summary), once taken over
_ended_with: int | None = None  # the exit status a take-over ended the script with (raised again if it was caught)
_taking_over = False  # a take-over function (tune's trials, scan) runs: its loaders are its own, not the script's


def _maybe_take_over(loader: Any, loader_id: int) -> None:
    """Hand the loader to a dlprobe command instead of letting the script train (returns only if it says None), or
    first let the loop run the steps TAKEOVER_STEPS_ENV asks for, timed (the take-over then comes in next())."""
    global _deferred
    target = os.environ.get(TAKEOVER_ENV)
    if not target or loader_id != int(os.environ.get(TAKEOVER_LOADER_ENV, "0")):
        return
    steps = os.environ.get(TAKEOVER_STEPS_ENV, "")
    if steps.isdigit() and int(steps) > 0:
        _deferred = LoopClock(loader, loader_id, int(steps))
        atexit.register(_loop_at_exit)  # a loop that stops early and never iterates again
        return
    _take_over(loader, loader_id)


def loop_timed() -> dict[str, Any] | None:
    """What the script's loop timed before the take-over (None: it was not asked to run first)."""
    return _loop_timed


def script_ended(normally: bool) -> None:
    """How the script ended: after an exception (Ctrl-C included), a loop still being timed is forgotten, so nothing
    is taken over or recorded at exit: the error is the news. (A non-zero sys.exit reaches no hook of python's before
    the atexit handlers: tune reads the exit status itself and ignores a loop recorded by a failed script.)"""
    global _deferred
    if not normally:
        _deferred = None


def ended_by_exception() -> None:
    """Before an uncaught exception that ends the process is recorded: its loop's timing is void, its batches sent."""
    script_ended(normally=False)
    flush_all()


def _take_over_deferred(iterator: Any) -> None:
    """The loop's steps are timed: stop its iterator's workers (the trials' own start on a machine without them) and
    take the loader over."""
    global _deferred, _loop_timed
    clock, _deferred = _deferred, None
    if clock is None:
        return
    _loop_timed = clock.summary()
    _stop_workers(iterator)
    _take_over(clock.loader, clock.loader_id)


def _stop_workers(iterator: Any) -> None:
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        try:
            iterator._shutdown_workers()
        except Exception as exc:
            probe_errors.record("hooks.takeover", exc, "the script's own workers may still run beside the trials")


def _loop_at_exit() -> None:
    """The script ended normally with its loop still timed: it stopped asking for batches before the steps were
    timed (a loop that breaks early). No trials here: the interpreter is shutting down (thread pools refuse work,
    Python 3.12.0-3.12.2 refuses to fork) and the script's own clean-up has run. What the loop timed is recorded
    instead, and tune runs the script again, taking the loader over at its first iteration."""
    global _deferred
    clock, _deferred = _deferred, None
    if clock is None:
        return
    _stop_workers(clock.iterator)
    _emit(EV_TUNE_LOOP, loader=clock.loader_id, **clock.summary())
    flush_all()


def _take_over(loader: Any, loader_id: int) -> None:
    """Run the take-over function (TAKEOVER_ENV's "module:function") on the loader, and end the script with its
    exit status (a None status lets the script go on)."""
    global _ended_with
    target = os.environ[TAKEOVER_ENV]
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    _emit(EV_TAKEOVER, loader=loader_id, function=target)
    flush_all()
    # The take-over runs inside this loader's probed __iter__, and it builds and iterates loaders of its own (tune's
    # trials): those must be probed like any other, so the re-entry guard is lifted while it runs.
    global _taking_over
    outer = getattr(_inside, "iter", False), getattr(_inside, "next", False)
    _inside.iter = _inside.next = False
    _taking_over = True
    try:
        code = function(loader)
    finally:
        _inside.iter, _inside.next = outer
        _taking_over = False
    if code is None:  # the function let the script go on (scan: past Lightning's sanity check to the next loader)
        return
    _ended_with = int(code)
    raise SystemExit(code)


def probe_id(loader: Any) -> int | None:
    """The id the probe gave a loader (its events carry it), or None if it was never iterated."""
    probe = _probes.get(loader)
    return probe.loader_id if probe is not None else None


def repeated_samples(loader: Any) -> tuple[int, int] | None:
    """(repeated samples, samples) the probe counted in the loader's current epoch, or None where it counts none."""
    probe = _probes.get(loader)
    dupes = probe.dupes if probe is not None else None
    return (dupes.duplicates, dupes.samples) if dupes is not None else None


def reset() -> None:
    """Forget every loader seen so far, so an in-process probe session (dlprobe.api) starts at loader 0."""
    global _deferred
    flush_all()
    _probes.clear()
    _iterators.clear()
    _all_probes.clear()
    _deferred = None


def flush_all() -> None:
    """Send whatever batch timings are still buffered (at exit, or before an error is reported)."""
    worker_batches.flush_threads()  # thread workers' rows: no finalizer of theirs runs at exit
    for probe in _all_probes:
        try:
            probe.flush()
        except Exception as exc:
            probe_errors.record("hooks.flush", exc, f"batch timings of loader {probe.loader_id} may be incomplete")
    probe_errors.flush()


def patched_spec(fullname: str, path: Any, target: Any, asking: object) -> importlib.machinery.ModuleSpec | None:
    """torch's dataloader module's spec from the other finders, with a loader that patches it once executed."""
    for finder in sys.meta_path:
        if finder is asking or getattr(finder, "_dlprobe_finder", False) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = cast("importlib.abc.Loader", _PatchingLoader(spec.loader))
            return spec
    return None


# The loader and the finder follow importlib's protocols without its abstract base classes: importing importlib.abc
# pulls in importlib.resources (tempfile, shutil, the compression modules), a tenth of the target's start-up.
class _PatchingLoader:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        patch_dataloader(module)


class _PatchOnImport:
    """Patches torch's dataloader module the moment the script imports it, so torch loads lazily."""

    _dlprobe_finder = True  # the injected sitecustomize's finder says the same: one of them is enough

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != DATALOADER_MODULE:
            return None
        return patched_spec(fullname, path, target, self)


_main_started = False
_atexit_registered = False


def _start_main_process() -> None:
    """This process's own in-flight slot, once: at install (the target `dlprobe run` started), or when a process
    probed only at its first DataLoader (a torchrun rank, a re-launched Lightning rank) builds it. DataLoader workers
    never build one, so they keep exactly the worker path."""
    global _main_started
    if _main_started:
        return
    _main_started = True
    script_errors.watch_uncaught(ended_by_exception)
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        inflight.start_main(run_dir)


def _forget_main_in_child() -> None:
    # A forked child that builds loaders of its own (a fork-started rank) needs a slot of its own; the parent's loop
    # being timed is the parent's (a child exiting must not record it).
    global _main_started, _deferred
    _main_started = False
    _deferred = None


os.register_at_fork(after_in_child=_forget_main_in_child)


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(flush_all)


def install() -> None:
    """Install the hooks (idempotent): patch now if torch's dataloader is already imported, else on import.

    in_training/target.py calls this before the script's first line; the injected sitecustomize has put its own
    lazy finder in place already in the same process, in which case no second one is added.
    """
    _start_main_process()
    quiet_fork.track_at_fork()  # before the script registers any: who does decides whether dlprobe may fork
    startup_profile.start()
    module = sys.modules.get(DATALOADER_MODULE)
    if module is not None:
        patch_dataloader(module)
    elif not any(getattr(finder, "_dlprobe_finder", False) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
    _register_atexit()
