"""`dlprobe run --log-to wandb|mlflow`: the script's own W&B or MLflow log calls carry dlprobe's latest numbers.

Where the script has imported the library itself, its log call is wrapped the moment the import finishes (the injected
sitecustomize's finder hands the import here): W&B's `Run.log` (which `wandb.log` and `run.log` both are), MLflow's
fluent `log_metric` / `log_metrics`. Each time the script logs, the numbers the supervisor last wrote to live.json for
this process (supervisor/live_json.py: its loaders' workers' USS, PSS, descriptors, batches, data wait; the node's
/dev/shm) go with it under `dlprobe/`, at the same step: for W&B in the same call (the user's dict copied, its keys
and step untouched, so the row is the one the script made); for MLflow one `log_metrics` right after the user's own,
on the run it logged to (its `run_id`, else this thread's active run) with its step and timestamp.

Never imported here: wandb or mlflow (a script that does not use one never loads it). Never raised: a failure of the
sink is a probe_error and a count in the `log_to` event, and the user's call goes ahead as it was given. At exit each
training process writes one `log_to` event per library asked for: what was logged where, or why nothing was."""

from __future__ import annotations

import atexit
import functools
import importlib.machinery
import inspect
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dlprobe import atomic
from dlprobe.in_training import probe_errors
from dlprobe.rundir.schema import (
    EV_LOG_TO,
    LIVE_FILE,
    LOG_TO_CHOICES,
    LOG_TO_ENV,
    LOG_TO_FAILED,
    LOG_TO_LOGGED,
    LOG_TO_NO_LOGS,
    LOG_TO_NO_NUMBERS,
    LOG_TO_NOT_IMPORTED,
    LOG_TO_PREFIX,
    RUN_DIR_ENV,
)

WANDB, MLFLOW = LOG_TO_CHOICES
WANDB_RUN_MODULE = "wandb.sdk.wandb_run"
MLFLOW_FLUENT_MODULE = "mlflow.tracking.fluent"


def asked() -> tuple[str, ...]:
    """The libraries --log-to named (the supervisor checked them)."""
    return tuple(name for name in os.environ.get(LOG_TO_ENV, "").split(",") if name in LOG_TO_CHOICES)


@dataclass
class Tally:
    """What one library's sink did in this process: the `log_to` event's numbers."""

    patched: bool = False
    calls: int = 0  # the script's log calls seen
    logged: int = 0  # of them, those that carried dlprobe's numbers
    keys: int = 0  # the most dlprobe keys one call carried
    failures: int = 0
    target: str | None = None  # the W&B run id or MLflow run id last logged to

    def state(self) -> str:
        if not self.patched:
            return LOG_TO_NOT_IMPORTED
        if self.logged:
            return LOG_TO_LOGGED
        if not self.calls:
            return LOG_TO_NO_LOGS
        return LOG_TO_FAILED if self.failures >= self.calls else LOG_TO_NO_NUMBERS


class Numbers:
    """live.json's numbers for this process (and its node), read again only when the file was replaced: one stat per
    log call, a read and a parse once a second at most."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stamp: tuple[int, int] | None = None
        self.values: dict[str, float] = {}

    def latest(self) -> dict[str, float]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:  # not written yet (the first second of the run): nothing to add
            return {}
        stamp = (st.st_ino, st.st_mtime_ns)  # each write is a rename: a new inode
        if stamp != self.stamp:
            data = json.loads(atomic.read_bytes(self.path))
            own = data.get("processes", {}).get(str(os.getpid()), {}).get("values", {})
            # only dlprobe's own prefix: nothing read here can land on a key of the script's
            self.values = {k: v for k, v in {**own, **data.get("node", {})}.items() if k.startswith(LOG_TO_PREFIX)}
            self.stamp = stamp
        return self.values


_tallies: dict[str, Tally] = {name: Tally() for name in LOG_TO_CHOICES}
_numbers: Numbers | None = None
# MLflow: the (run, step, live.json read) last added. A script that logs several calls per step (log_metric("loss"),
# then log_metrics({...})) gets the numbers once per step, not a copy per call.
_mlflow_last: tuple[str, Any, tuple[int, int] | None] | None = None
# MLflow's file store writes one file per key: ~45 keys cost ~35 ms a log (benchmarks/sink_cost.py), 50 times the
# user's own call. At most one addition every MLFLOW_EVERY_S keeps that under 1% of a second whatever the script's
# cadence; the live numbers change once a second anyway, and MLflow's own system metrics sample every 10 s.
MLFLOW_EVERY_S = 5.0
_mlflow_at: float | None = None  # time.monotonic() of the last addition
_watching = False  # this process is a training process: it reports at exit even if it never logged


def _latest() -> dict[str, float]:
    global _numbers
    if _numbers is None:
        _numbers = Numbers(os.path.join(os.environ.get(RUN_DIR_ENV, "."), LIVE_FILE))
    return _numbers.latest()


def _failed(sink: str, exc: BaseException) -> None:
    _tallies[sink].failures += 1
    probe_errors.record(f"sinks.{sink}", exc, f"some of the script's {sink} logs lack dlprobe's numbers (--log-to)")


# --- W&B -----------------------------------------------------------------------------------------------------


def wandb_args(run: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Run.log's arguments with dlprobe's numbers added to a copy of the user's dict (its own keys win), every
    other argument (step, commit) as given: the same row at the same step, with more columns."""
    tally = _tallies[WANDB]
    tally.calls += 1
    data = args[0] if args else kwargs.get("data")
    if not isinstance(data, Mapping):
        return args, kwargs  # not a dict: W&B's own error, as without dlprobe
    numbers = _latest()
    if not numbers:
        return args, kwargs
    merged = {**{key: value for key, value in numbers.items() if key not in data}, **data}
    tally.logged += 1
    tally.keys = max(tally.keys, len(merged) - len(data))
    tally.target = str(getattr(run, "id", None) or "") or tally.target
    if args:
        return (merged, *args[1:]), kwargs
    return args, {**kwargs, "data": merged}


def _patch_wandb() -> None:
    module = sys.modules.get(WANDB_RUN_MODULE)
    run_class = getattr(module, "Run", None)
    original = getattr(run_class, "log", None)
    if run_class is None or original is None or getattr(original, "_dlprobe_sink", False):
        return

    @functools.wraps(original)
    def log(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            args, kwargs = wandb_args(self, args, kwargs)
        except Exception as exc:
            _failed(WANDB, exc)
        return original(self, *args, **kwargs)

    log._dlprobe_sink = True  # type: ignore[attr-defined]
    run_class.log = log
    _tallies[WANDB].patched = True


# --- MLflow --------------------------------------------------------------------------------------------------


def _patch_mlflow() -> None:
    fluent = sys.modules.get(MLFLOW_FLUENT_MODULE)
    package = sys.modules.get("mlflow")
    log_metrics = getattr(fluent, "log_metrics", None)
    if fluent is None or log_metrics is None or getattr(log_metrics, "_dlprobe_sink", False):
        return
    active_run = fluent.active_run
    for name in ("log_metric", "log_metrics"):
        original = getattr(fluent, name, None)
        if original is None:
            continue
        wrapped = _mlflow_wrapper(original, log_metrics, active_run)
        setattr(fluent, name, wrapped)
        if package is not None and getattr(package, name, None) is original:
            setattr(package, name, wrapped)  # `mlflow.log_metric` is the fluent function, bound at mlflow's import
    _tallies[MLFLOW].patched = True


def _mlflow_wrapper(original: Any, log_metrics: Any, active_run: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)  # the user's own call first, untouched; its error is the user's
        try:
            mlflow_add(signature.bind(*args, **kwargs).arguments, log_metrics, active_run)
        except Exception as exc:
            _failed(MLFLOW, exc)
        return result

    wrapper._dlprobe_sink = True  # type: ignore[attr-defined]
    return wrapper


def mlflow_add(call: Mapping[str, Any], log_metrics: Any, active_run: Any) -> None:
    """After the user's log_metric(s) call `call` (its bound arguments): dlprobe's numbers on the same run, at the
    same step and timestamp, through MLflow's own (unwrapped) log_metrics."""
    tally = _tallies[MLFLOW]
    tally.calls += 1
    numbers = _latest()
    if not numbers:
        return
    run_id = call.get("run_id")
    if run_id is None:
        run = active_run()  # this thread's run: the one the user's call just logged to (or started)
        if run is None:
            return
        run_id = run.info.run_id
    global _mlflow_last
    step = call.get("step")
    # Once per step; a script that gives no step (MLflow's 0 for all) gets each new reading once.
    added = (str(run_id), step, _numbers.stamp if step is None and _numbers is not None else None)
    if added == _mlflow_last:
        return
    global _mlflow_at
    now = time.monotonic()
    if _mlflow_at is not None and now - _mlflow_at < MLFLOW_EVERY_S:
        return
    log_metrics(
        dict(numbers),
        step=step,
        synchronous=call.get("synchronous"),
        run_id=run_id,
        timestamp=call.get("timestamp"),
    )
    tally.logged += 1
    tally.keys = max(tally.keys, len(numbers))
    tally.target = str(run_id)
    _mlflow_last, _mlflow_at = added, now


# --- the import hook and the report at exit --------------------------------------------------------------------

_PATCHES = {WANDB: _patch_wandb, MLFLOW: _patch_mlflow}


def patch_loaded() -> None:
    """Wrap the log calls of every library asked for that is imported already."""
    for name in asked():
        if name in sys.modules:
            try:
                _PATCHES[name]()
            except Exception as exc:
                _failed(name, exc)


def patched_spec(fullname: str, path: Any, target: Any, asking: object) -> importlib.machinery.ModuleSpec | None:
    """The library's spec from the other finders, with a loader that wraps its log calls once it has executed."""
    if fullname not in asked():
        return None
    for finder in sys.meta_path:
        if finder is asking or getattr(finder, "_dlprobe_sink_finder", False) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, fullname)  # type: ignore[assignment]
            return spec
    return None


class _PatchingLoader:
    """importlib's loader protocol without importlib.abc (as hooks._PatchingLoader: it is slow to import)."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)  # the library's own import error is the script's, as without dlprobe
        _register_report()
        try:
            _PATCHES[self.name]()
        except Exception as exc:
            _failed(self.name, exc)


def watch() -> None:
    """This process trains (the target, or a rank at its first DataLoader): it reports at exit what its sinks did,
    a library the script never imported included."""
    global _watching
    _watching = True
    _register_report()
    patch_loaded()


_registered = False


def _register_report() -> None:
    global _registered
    if not _registered:
        _registered = True
        atexit.register(report)


def report() -> None:
    """One `log_to` event per library asked for: in a training process always, elsewhere (a launcher, a worker that
    imported the script's module) only if the script logged there."""
    try:
        from dlprobe.in_training.event_log import get_log

        log = get_log()
        if log is None:
            return
        for name in asked():
            tally = _tallies[name]
            if not _watching and not tally.calls:
                continue
            log.emit(EV_LOG_TO, sink=name, state=tally.state(), calls=tally.calls, logged=tally.logged,
                     keys=tally.keys, target=tally.target, failures=tally.failures)  # fmt: skip
    except Exception as exc:
        probe_errors.record("sinks.report", exc, "the report does not say what --log-to logged")
    probe_errors.flush()


def _forget_in_child() -> None:
    # A forked child's logs are its own (a fork-started rank); its parent's counts and numbers are not.
    global _numbers, _watching, _mlflow_last
    for name in _tallies:
        patched = _tallies[name].patched
        _tallies[name] = Tally(patched=patched)
    _numbers = None
    _mlflow_last = None
    _watching = False


os.register_at_fork(after_in_child=_forget_in_child)
