"""Hooks on torch's DataLoader: the import hook that patches torch's dataloader module, and the wrappers it puts on
DataLoader.__init__/__iter__ and the iterators' __next__/_shutdown_workers (subclasses too). Behaviour and results are
unchanged; each wrapper hands the work to the module that owns it:

- loader_probe.py: one loader's probe (epochs, batch waits, worker counts, the events that carry them)
- loader_registry.py: the probes of every loader, the re-entry guard, flush_all
- loader_start.py: the loader's settings and what is recorded before its workers run
- takeover.py: scan's and tune's take-over of the script's loader
"""

from __future__ import annotations

import atexit
import functools
import importlib.machinery
import os
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from dlprobe.in_training import (
    elastic_error,
    inflight,
    loader_start,
    probe_errors,
    quiet_fork,
    rng_streams,
    runtime_state,
    sample_order,
    script_errors,
    sinks,
    start_method_choice,
    startup_profile,
    takeover,
    worker_gc,
)
from dlprobe.in_training.event_log import emit
from dlprobe.in_training.loader_probe import LoaderProbe
from dlprobe.in_training.loader_registry import all_probes, created, flush_all, forget_loaders, inside, iterators
from dlprobe.in_training.run_limits import LIMITS
from dlprobe.rundir.schema import (
    EV_ACCEL,
    EV_FORK_STATE,
    EV_START_METHOD,
    EV_START_METHOD_FORCED,
    RUN_DIR_ENV,
    TAKEOVER_ENV,
)

if TYPE_CHECKING:
    import importlib.abc

DATALOADER_MODULE = "torch.utils.data.dataloader"


def _wrap_init(original_init: Any) -> Any:
    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        created.setdefault(self, time.time())
        _start_main_process()  # a process probed through sitecustomize becomes a training process here
        startup_profile.mark_loader_created()
        original_init(self, *args, **kwargs)

    __init__._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return __init__


def _wrap_iter(original_iter: Any) -> Any:
    """DataLoader.__iter__ (or a subclass's own): config, epochs, worker pids; the iterator is unchanged."""

    @functools.wraps(original_iter)
    def __iter__(self: Any) -> Any:
        if getattr(inside, "iter", False):
            return original_iter(self)
        inside.iter = True
        try:
            return _probed_iter(self, original_iter)
        finally:
            inside.iter = False

    __iter__._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return __iter__


def _probed_iter(self: Any, original_iter: Any) -> Any:
    startup_profile.stop("iter")  # before any worker is forked
    # Before anything else: a worker re-running the script (spawn, forkserver) must get the forced method too, as
    # it would get Python 3.14's default, and meet the same "bootstrapping phase" error.
    forced = start_method_choice.apply(self)
    if self.num_workers > 0 and loader_start.bootstrapping():
        try:
            return original_iter(self)  # raises multiprocessing's "bootstrapping phase" error, as it would unprobed
        except RuntimeError as exc:
            if "bootstrapping phase" in str(exc):  # multiprocessing's own words (_check_not_importing_main)
                loader_start.record_main_guard(self, exc)
            raise
    if takeover.ended_with is not None:  # the script caught the take-over's SystemExit and went on: it must not train
        raise SystemExit(takeover.ended_with)
    clock = takeover.deferred
    if clock is not None and not (clock.loader is self and clock.new_pass()):
        # The loop being timed moved on to another loader (Lightning's sanity check, then training), or its passes
        # over this one are too short to time: the take-over happens now, never after the whole training.
        takeover.take_over_deferred(clock.iterator)
    clock = None  # this frame holds no loop clock while the loader's iterator is made
    probe = loader_start.probe_for(self)
    if forced is not None:
        emit(EV_START_METHOD_FORCED, loader=probe.loader_id, **forced)
    if probe.epoch < 0:
        takeover.maybe_take_over(self, probe.loader_id)
    previous = getattr(self, "_iterator", None)
    if probe.epoch < 0 and previous is None:
        loader_start.emit_start_readiness(self, probe.loader_id)
    inflight.loop_creating_iterator(probe.loader_id)
    user_init = inflight.wrap_worker_init(self, probe.loader_id)
    threads = getattr(self, "worker_method", None) == "thread"  # nothing is forked for thread workers
    rng_init = rng_streams.NOT_SWAPPED
    if self.num_workers > 0 and not threads and (previous is None or not self.persistent_workers):
        # Threads, OpenMP and CUDA state right before the fork: a thread holding a lock now leaves it
        # locked forever in every worker (hang causes and the fork-hazard finding read this).
        emit(EV_FORK_STATE, loader=probe.loader_id, epoch=probe.epoch + 1, **runtime_state.fork_snapshot())
        loader_start.emit_fork_handles(self, probe.loader_id, probe.epoch + 1)
        rng_init = rng_streams.wrap_worker_init(self, probe.loader_id, probe.epoch + 1)  # the dataset's generators
    start = time.perf_counter()
    worker_gc.arm(self.num_workers > 0 and not threads)  # its workers' collections timed from their fork
    try:
        iterator = original_iter(self)
    except Exception as exc:
        rng_streams.restore_worker_init(self, rng_init)
        inflight.restore_worker_init(self, user_init)
        loader_start.record_unpicklable(self, probe.loader_id, exc)
        raise
    finally:
        worker_gc.arm(False)
        rng_streams.restore_worker_init(self, rng_init)
        inflight.restore_worker_init(self, user_init)  # the wrapper only travels to the workers as they start
        inflight.loop_outside(probe.loader_id, probe.batches)
    new_iterator = iterator is not previous
    if new_iterator and probe.epoch < 0:
        method = loader_start.start_method_of(self, iterator)
        if method:
            emit(EV_START_METHOD, loader=probe.loader_id, start_method=method)
    probe.begin_epoch(iterator, new_iterator, time.perf_counter() - start)
    try:
        sample_order.begin(iterator, self)
    except Exception as exc:  # never break training for the sampler's facts
        probe_errors.record("hooks.sample_order", exc, f"loader {probe.loader_id}'s sampler is not named")
    if _is_loader_iterator(iterator):
        iterators[iterator] = probe
    return iterator


def _is_loader_iterator(iterator: Any) -> bool:
    # Known by what it does: torch's iterator protocol (an index sampler feeding fetches), whatever the class.
    return hasattr(iterator, "_sampler_iter") and hasattr(iterator, "_next_data")


def _wrap_next(original_next: Any) -> Any:
    """An iterator's __next__: how long the loop waits for each batch, and errors raised to the loop."""

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        probe = iterators.get(self)
        if probe is None or getattr(inside, "next", False):
            return original_next(self)
        inside.next = True
        try:
            return _probed_next(self, probe, original_next)
        finally:
            inside.next = False

    __next__._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return __next__


def _probed_next(self: Any, probe: LoaderProbe, original_next: Any) -> Any:
    if LIMITS.active:  # `dlprobe check` bounds the run: stop before fetching one batch too many
        LIMITS.enforce(sum(p.batches for p in all_probes))
    if takeover.ended_with is not None:  # the script caught the take-over's SystemExit and went on: it must not train
        raise SystemExit(takeover.ended_with)
    clock = takeover.deferred
    if clock is not None and clock.loader_id != probe.loader_id:
        clock = None
    if clock is not None:
        clock.asking()
        if clock.done():
            takeover.take_over_deferred(self)
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
    if sinks.ON:  # --log-to: the live summary into the script's own W&B/MLflow run, at most once a second
        sinks.on_batch()
    if clock is not None:
        clock.returned(self)
    if probe.batches == 2:  # by now the loop has had one step to move a batch to a device
        emit(EV_ACCEL, loader=probe.loader_id, **runtime_state.accel_state(self))
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
    if getattr(inside, "next", False) or os.environ.get(TAKEOVER_ENV) or _python_exiting():
        return
    probe = iterators.get(iterator)
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
        script_errors.watch_uncaught(takeover.ended_by_exception)
    try:  # loaders without workers fetch in this process: record those too
        inflight.patch_fetchers()
    except Exception as exc:
        probe_errors.record(
            "inflight.fetchers", exc, "fetches in the training process (num_workers=0) have no in-flight indices"
        )


def reset() -> None:
    """Forget every loader seen so far, so an in-process probe session (dlprobe.api) starts at loader 0."""
    flush_all()
    forget_loaders()
    takeover.forget_loop()


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
    script_errors.watch_uncaught(takeover.ended_by_exception)
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        inflight.start_main(run_dir)
        sinks.configure()


def _forget_main_in_child() -> None:
    # A forked child that builds loaders of its own (a fork-started rank) needs a slot of its own; the parent's loop
    # being timed is the parent's (a child exiting must not record it).
    global _main_started
    _main_started = False
    takeover.forget_loop()


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
