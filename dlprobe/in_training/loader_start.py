"""What the probe records about a loader before its workers run: its settings and dataset (the `loader` event, as
its probe is made), the start method the workers used, the handles forked into them, what forkserver and spawn would
make of it (start_readiness.py, in a detached copy), and why its workers could not start under spawn/forkserver."""

from __future__ import annotations

import os
import sys
from typing import Any

from dlprobe.in_training import (
    detached,
    fork_handles,
    identity,
    probe_errors,
    quiet_fork,
    start_method_choice,
    takeover,
)
from dlprobe.in_training.dataset_inspect import summarize_dataset
from dlprobe.in_training.event_log import emit
from dlprobe.in_training.loader_probe import LoaderProbe, in_distributed_job, thread_workers
from dlprobe.in_training.loader_registry import all_probes, created, flush_all, probes
from dlprobe.redact import redact_text
from dlprobe.rundir.schema import (
    EV_FORK_HANDLES,
    EV_LOADER,
    EV_START_READINESS,
    EV_START_READINESS_SKIPPED,
    EV_WORKER_START_FAILED,
    TAKEOVER_ENV,
    WORKER_START_MAIN_GUARD,
    WORKER_START_UNPICKLABLE,
)


def probe_for(loader: Any) -> LoaderProbe:
    """The loader's probe, made the first time the loader is iterated (its `loader` event sent then)."""
    probe = probes.get(loader)
    if probe is None:
        probe = LoaderProbe(len(all_probes))
        probes[loader] = probe
        all_probes.append(probe)
        # _DatasetKind.Iterable == 1; in a distributed job every loader's samples are sketched, so that the
        # report can tell ranks that read the same samples (no DistributedSampler) apart.
        probe.iterable = bool(getattr(loader, "_dataset_kind", 0))
        probe.hash_samples = probe.iterable or in_distributed_job()
        identity.emit_if_changed()  # who wrote the loader comes before the loader: rank, node, host
        try:
            emit(EV_LOADER, **loader_config(loader, probe.loader_id))
        except Exception as exc:  # inspection must never break training
            emit(EV_LOADER, loader=probe.loader_id, inspect_error=repr(exc))
            probe_errors.record(
                "hooks.loader_config", exc, f"loader {probe.loader_id}'s settings and dataset summary are missing"
            )
    return probe


def loader_config(loader: Any, loader_id: int) -> dict[str, Any]:
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
        "created_t": created.get(loader),
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


def start_method_of(loader: Any, iterator: Any) -> str | None:
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


def emit_fork_handles(loader: Any, loader_id: int, epoch: int) -> None:
    """The files and sockets the dataset's objects hold as the workers fork (shared-handle reads them)."""
    try:
        found = fork_handles.dataset_handles(loader.dataset)
    except Exception as exc:  # an exotic dataset must never break the user's training
        probe_errors.record("hooks.fork_handles", exc, "the descriptors the dataset hands its workers are not known")
        return
    if found["handles"] or found["mapped"] or found["pools"]:
        emit(EV_FORK_HANDLES, loader=loader_id, epoch=epoch, **found)


def bootstrapping() -> bool:
    """A spawn/forkserver worker still importing the script: multiprocessing refuses to start processes here."""
    mp = sys.modules.get("multiprocessing")
    return bool(mp is not None and getattr(mp.current_process(), "_inheriting", False))


def record_main_guard(loader: Any, exc: BaseException) -> None:
    """This process is a worker re-running the script, whose top level iterates a loader with workers."""
    from dlprobe.in_training.start_failures import script_frame

    file, line = script_frame()
    emit(
        EV_WORKER_START_FAILED,
        loader=len(all_probes),  # the script builds its loaders in the same order in every process
        start_method=start_method_choice.current_method(loader),
        kind=WORKER_START_MAIN_GUARD,
        error=f"{type(exc).__name__}: {redact_text(str(exc))[:300]}",
        file=file,
        line=line,
    )
    flush_all()


def record_unpicklable(loader: Any, loader_id: int, exc: BaseException) -> None:
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
    emit(
        EV_WORKER_START_FAILED,
        loader=loader_id,
        start_method=method,
        kind=WORKER_START_UNPICKLABLE,
        error=f"{type(exc).__name__}: {redact_text(str(exc))[:300]}",
        path=found.path,
        object_type=found.object_type,
        reason=found.reason,
    )


def emit_start_readiness(loader: Any, loader_id: int) -> None:
    """Once per loader, before its first workers start: what forkserver and spawn would make of it (bounded; nothing
    is changed). Not in a multiprocessing child."""
    if not loader.num_workers or getattr(loader, "worker_method", None) == "thread" or takeover.taking_over:
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
            or bootstrapping()
            or getattr(main, "__name__", "") == "__mp_main__"
        ):
            return
        from dlprobe.in_training import isolated, start_readiness  # here: pickle and ast stay off the start-up

        # No copy where the script would see it or where it could get the training killed (in_training/quiet_fork.py)
        refused = quiet_fork.blocker() or quiet_fork.headroom_blocker(quiet_fork.anon_resident_bytes())
        if refused is not None:
            emit(EV_START_READINESS_SKIPPED, loader=loader_id, reason=refused)
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
                emit(EV_START_READINESS_SKIPPED, loader=loader_id, reason=missing, pid=owner)
            else:
                emit(EV_START_READINESS, loader=loader_id, **{**found, "cpu_share": cpu_share}, pid=owner)

        detached.start(check_in_copy, start_readiness.CHILD_TIMEOUT_S)
    except Exception as exc:  # an exotic dataset must never break the user's training
        probe_errors.record("hooks.start_readiness", exc, f"loader {loader_id}'s start-method readiness is missing")
