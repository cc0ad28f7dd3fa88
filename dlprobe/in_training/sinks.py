"""`dlprobe run --log-to wandb|mlflow`: the supervisor's live per-worker summary (live_summary.json), logged into the
script's OWN active run, from the loop's thread, at most once a second and only when the summary changed.

- W&B: only while `wandb.run` is set, with `wandb.log(values, commit=False)`: the values ride on the script's next
  step (never a step of dlprobe's, never `wandb.init`).
- MLflow: only while `mlflow.active_run()` is set in the thread that iterates the loader, with
  `MlflowClient().log_batch(run_id, metrics, synchronous=False)` where the client has it; each point's step is the
  batches the loop has taken (every loader of this process), its timestamp the wall clock.

Neither library is ever imported by dlprobe: one the script has not imported itself (`sys.modules`) is left alone.
A sink that logged nothing says why once, at exit (a `probe_error` event; the report's `probe-degraded` finding:
"--log-to wandb: the script started no W&B run; nothing was logged"); one that raises is recorded once and turned
off. Nothing of it reaches the training: every exception stops here. hooks.py calls `on_batch` after each batch the
loop takes while `ON` is set; with `--log-to` off that is one attribute read per batch (benchmarks/sink_cost.py)."""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

from dlprobe import atomic
from dlprobe.in_training import loader_registry, probe_errors
from dlprobe.in_training.sink_keys import keys_for
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import LOG_TO_CHOICES, LOG_TO_ENV, LOG_TO_WHERE, RUN_DIR_ENV

LOG_INTERVAL_S = 1.0  # the most often a sink logs (the summary itself changes every 0.5 s at most)
MAX_KEYS = 256  # distinct keys logged over a run at most: a script making a new loader every epoch stays bounded

ON = False  # read by hooks.py on every batch: True only in a training process of a `--log-to` run


class SinkUnused(Exception):
    """Why a sink logged nothing (not an error of the probe's: what the script did)."""


class _Sink:
    name = ""
    module = ""
    title = ""

    def __init__(self) -> None:
        self.logged = 0
        self.failed = False
        self.reason: str | None = None  # why the last attempt logged nothing

    def log(self, library: Any, values: dict[str, float], step: int) -> bool:
        raise NotImplementedError


class WandbSink(_Sink):
    name, module, title = "wandb", "wandb", "W&B"

    def log(self, library: Any, values: dict[str, float], step: int) -> bool:
        if getattr(library, "run", None) is None:
            self.reason = "the script started no W&B run"
            return False
        library.log(values, commit=False)  # onto the script's own next step
        return True


class MlflowSink(_Sink):
    name, module, title = "mlflow", "mlflow", "MLflow"

    def __init__(self) -> None:
        super().__init__()
        self.client: Any = None
        self.client_uri: str | None = None
        self.asynchronous: bool | None = None

    def log(self, library: Any, values: dict[str, float], step: int) -> bool:
        active = library.active_run()  # thread-local: this is the thread that iterates the loader
        if active is None:
            self.reason = "the script had no active MLflow run in the thread that iterates its DataLoader"
            return False
        uri = library.get_tracking_uri()
        if self.client is None or uri != self.client_uri:
            self.client, self.client_uri = library.MlflowClient(), uri
        if self.asynchronous is None:
            import inspect  # once, and only in a run that logs into MLflow

            self.asynchronous = "synchronous" in inspect.signature(self.client.log_batch).parameters
        metric = library.entities.Metric
        at = int(time.time() * 1000)
        metrics = [metric(key, value, at, step) for key, value in values.items()]
        if self.asynchronous:  # MLflow's own queue and thread: a remote server's round trip is not the loop's
            self.client.log_batch(active.info.run_id, metrics=metrics, synchronous=False)
        else:
            self.client.log_batch(active.info.run_id, metrics=metrics)
        return True


SINKS: dict[str, type[_Sink]] = {"wandb": WandbSink, "mlflow": MlflowSink}


class _State:
    def __init__(self) -> None:
        self.sinks: list[_Sink] = []
        self.path: str | None = None
        self.next_at = 0.0
        self.seen: tuple[int, int] | None = None  # the summary's (inode, mtime) last read
        self.keys: set[str] = set()
        self.started = 0.0


_state = _State()


def configure(environ: dict[str, str] | None = None) -> None:
    """Turn the sinks on in this process if the run asked for them (`DLPROBE_LOG_TO`); called once per training
    process (hooks._start_main_process)."""
    global ON
    env = os.environ if environ is None else environ
    names = [name for name in (env.get(LOG_TO_ENV) or "").split(",") if name in LOG_TO_CHOICES]
    run_dir = env.get(RUN_DIR_ENV)
    if not names or not run_dir:
        return
    _state.sinks = [SINKS[name]() for name in dict.fromkeys(names)]
    _state.path = os.fspath(RunDir(run_dir).live_summary)
    _state.next_at = 0.0
    _state.seen = None
    _state.keys = set()
    _state.started = time.monotonic()
    ON = True
    atexit.register(_at_exit)


def on_batch() -> None:
    """After a batch the loop took: at most once a second, log the summary if it changed. Never raises."""
    now = time.monotonic()
    if now < _state.next_at:
        return
    _state.next_at = now + LOG_INTERVAL_S
    try:
        _log_new()
    except Exception as exc:  # a bug of the probe's own: every sink off, the training untouched
        _off()
        probe_errors.record(LOG_TO_WHERE, exc, "the live summary was no longer logged")


def _read_new() -> dict[str, float] | None:
    """This process's keys from the summary, if it changed since the last read; else None."""
    if _state.path is None:
        return None
    try:
        info = os.stat(_state.path, follow_symlinks=False)
    except FileNotFoundError:
        return None  # not written yet: the supervisor writes it once it has read the tree
    seen = (info.st_ino, info.st_mtime_ns)
    if seen == _state.seen:
        return None
    _state.seen = seen
    return _bounded(keys_for(json.loads(atomic.read_bytes(_state.path)), os.getpid()))


def _bounded(values: dict[str, float]) -> dict[str, float]:
    new = [key for key in values if key not in _state.keys]
    room = MAX_KEYS - len(_state.keys)
    if len(new) > room:
        dropped = new[room:]
        probe_errors.record(
            f"{LOG_TO_WHERE} keys",
            OverflowError(f"{MAX_KEYS} distinct keys logged already; {dropped[0]} and others left out"),
            "the keys of loaders made later in the run were not logged",
        )
        for key in dropped:
            del values[key]
        new = new[:room]
    _state.keys.update(new)
    return values


def _step() -> int:
    return sum(probe.batches for probe in loader_registry.all_probes)


def _log_new() -> None:
    values = _read_new()
    if not values:
        return
    step = _step()
    for sink in _state.sinks:
        if sink.failed:
            continue
        library = sys.modules.get(sink.module)  # only what the script imported itself
        if library is None:
            sink.reason = f"the script did not import {sink.module}"
            continue
        try:
            if sink.log(library, values, step):
                sink.logged += 1
        except Exception as exc:  # the library's own error (a closed run, a refused write): this sink off
            sink.failed = True
            probe_errors.record(f"{LOG_TO_WHERE} {sink.name}", exc, f"dlprobe's numbers stopped going to {sink.title}")


def _off() -> None:
    global ON
    ON = False


def _at_exit() -> None:
    """A sink that logged nothing says why, once."""
    rank = os.environ.get("RANK")
    on_rank = f" (rank {rank})" if rank not in (None, "") else ""
    for sink in _state.sinks:
        if sink.logged or sink.failed:
            continue
        reason = sink.reason
        if reason is None:
            ran = time.monotonic() - _state.started
            reason = (
                f"dlprobe had no reading of this process yet after {ran:.1f} s (the supervisor writes one about "
                "every 0.5 s once the loop runs)"
            )
        probe_errors.record(
            f"{LOG_TO_WHERE} {sink.name}", SinkUnused(f"{reason}{on_rank}; nothing was logged"), "nothing was logged"
        )
    _state.sinks = []
    _off()


def _forget_in_child() -> None:
    # A forked child (a DataLoader worker) logs nothing; one that becomes a training process configures again.
    _state.sinks = []
    _off()


os.register_at_fork(after_in_child=_forget_in_child)
