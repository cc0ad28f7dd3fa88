"""Type checks of the run directory's records against their TypedDicts in schema.py, as a reader loads them.

A record cut short, written by another version, or damaged (a string where a number belongs, a dict where an int
does) is skipped and counted here, once, instead of raising in whichever analyzer reads that field first."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Union

from dlprobe.rundir import schema

# The fields a reader indexes directly (record["t"]), per event kind or sample kind: a record without them is unusable.
EVENT_REQUIRED: dict[str, tuple[str, ...]] = {
    schema.EV_LOADER: ("t", "loader"),
    schema.EV_EPOCH: ("t", "loader", "epoch"),
    schema.EV_BATCHES: ("t", "loader"),
    schema.EV_EPOCH_END: ("t", "loader"),
    schema.EV_WORKERS_LAST: ("t",),
    schema.EV_WORKER_START: ("t", "pid"),
    schema.EV_WORKER_GC: ("t", "pid", "collections"),
    schema.EV_BATCH_SEND_ERROR: ("t", "pid"),
    schema.EV_WORKER_RNG: ("t", "loader", "epoch", "worker_id", "rngs"),
    schema.EV_WORKER_ATTRS: ("t", "pid", "loader", "phase", "batches", "attrs"),
    schema.EV_SAMPLE_ORDER: ("t", "loader", "epoch", "digest", "batches"),
    schema.EV_SCRIPT_ERROR: ("t",),
    # tune's and scan's readers index these (tune/results.py collect_trials, scan/result.py feed)
    schema.EV_TRIAL_START: ("t", "key", "num_workers"),
    schema.EV_TRIAL_END: ("t", "key"),
    schema.EV_TRIAL_SKIPPED: ("key",),
    schema.EV_SCAN_PROGRESS: ("done",),
    schema.EV_SCAN_BAD: ("index",),
    schema.EV_SCAN_END: ("scanned",),
}
SAMPLE_REQUIRED: dict[str, tuple[str, ...]] = {
    schema.SAMPLE_PROC: ("pid",),
    schema.SAMPLE_READING: ("t",),
    schema.SAMPLE_GONE: ("pid", "t"),
    schema.SAMPLE_THREAD: ("pid", "tid"),
    schema.SAMPLE_FD_TARGETS: ("pid", "t", "n", "top"),
    schema.SAMPLE_UNREAD: ("pid", "t", "error"),
}


@cache
def _hints(record_type: type) -> dict[str, Any]:
    return typing.get_type_hints(record_type, vars(schema))


def conforms(value: Any, annotation: Any) -> bool:
    """Whether a JSON value fits a type of schema.py (int, float, str, bool, None, unions, list[...], dict[str, ...],
    TypedDicts: their present keys; Any fits everything). A JSON number is no bool, and no NaN counts as a float."""
    return _checker(annotation)(value)


Check = Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def _is_float(value: Any) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _anything(value: Any) -> bool:
    return True


@cache
def _checker(annotation: Any) -> Check:
    """`conforms` for one annotation, worked out once: a run's events repeat a few types thousands of times (the
    workers' batch rows are lists of numbers), and `dlprobe run` reads them all after the script has exited."""
    if annotation is Any:
        return _anything
    if annotation is None or annotation is type(None):
        return lambda value: value is None
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        arms = tuple(_checker(arm) for arm in typing.get_args(annotation))
        return lambda value: any(arm(value) for arm in arms)
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        check_item = _checker(item)
        if check_item is _anything:
            return lambda value: isinstance(value, list)
        return lambda value: isinstance(value, list) and all(map(check_item, value))
    if origin is dict:
        _, item = typing.get_args(annotation) or (Any, Any)
        check_value = _checker(item)
        return lambda value: isinstance(value, dict) and all(map(check_value, value.values()))
    if typing.is_typeddict(annotation):
        return lambda value: isinstance(value, dict) and typed_dict_problem(value, annotation) is None
    if annotation is bool:
        return lambda value: isinstance(value, bool)
    if annotation is int:
        return _is_int
    if annotation is float:
        return _is_float
    if annotation is str:
        return lambda value: isinstance(value, str)
    if annotation is list or annotation is dict:
        return lambda value: isinstance(value, annotation)
    return _anything  # a type this checker does not know: the readers' own problem, as before


@cache
def _field_checkers(record_type: type) -> dict[str, Check]:
    return {key: _checker(hint) for key, hint in _hints(record_type).items()}


def typed_dict_problem(record: Any, record_type: type, required: tuple[str, ...] = ()) -> str | None:
    """What is wrong with a record (None if nothing): not an object, a required field missing, a field of the wrong
    type. Fields the type does not name are left alone (a newer writer may add some)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    for key in (*record_type.__required_keys__, *required):  # type: ignore[attr-defined]
        if key not in record:
            return f"no {key!r}"
    checkers = _field_checkers(record_type)
    for key, value in record.items():
        check = checkers.get(key)
        if check is not None and not check(value):
            return _field_problem(key, value, _hints(record_type)[key])
    return None


def _field_problem(key: str, value: Any, annotation: Any) -> str:
    """'t' is a string; inside an object of a TypedDict, the field that is wrong: 'machine'.'mem_total' is a list."""
    if typing.is_typeddict(annotation) and isinstance(value, dict):
        inner = typed_dict_problem(value, annotation)
        if inner is not None:
            return f"{key!r}.{inner}"
    return f"{key!r} is {_json_type(value)}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


EVENT_TYPES: dict[str, type] = {
    schema.EV_START: schema.StartEvent,
    schema.EV_SCRIPT_ERROR: schema.ScriptErrorEvent,
    schema.EV_LAUNCHER_FAILURE: schema.LauncherFailureEvent,
    schema.EV_STOP: schema.StopEvent,
    schema.EV_PROCESS: schema.ProcessEvent,
    schema.EV_LOADER: schema.LoaderEvent,
    schema.EV_START_METHOD: schema.StartMethodEvent,
    schema.EV_START_METHOD_FORCED: schema.StartMethodForcedEvent,
    schema.EV_WORKER_START_FAILED: schema.WorkerStartFailedEvent,
    schema.EV_EPOCH: schema.EpochEvent,
    schema.EV_BATCHES: schema.BatchesEvent,
    schema.EV_EPOCH_END: schema.EpochEndEvent,
    schema.EV_WORKER_BATCHES: schema.WorkerBatchesEvent,
    schema.EV_WORKERS_LAST: schema.WorkersLastEvent,
    schema.EV_WORKER_START: schema.WorkerStartEvent,
    schema.EV_WORKER_GC: schema.WorkerGcEvent,
    schema.EV_BATCH_SEND_ERROR: schema.BatchSendErrorEvent,
    schema.EV_BATCH_INFO: schema.BatchInfoEvent,
    schema.EV_LOADER_ERROR: schema.LoaderErrorEvent,
    schema.EV_SAMPLE_CHECK: schema.SampleCheckEvent,
    schema.EV_PROBE_ERROR: schema.ProbeErrorEvent,
    schema.EV_DUPES: schema.DupesEvent,
    schema.EV_FORK_STATE: schema.ForkStateEvent,
    schema.EV_FORK_HANDLES: schema.ForkHandlesEvent,
    schema.EV_WORKER_RNG: schema.WorkerRngEvent,
    schema.EV_WORKER_ATTRS: schema.WorkerAttrsEvent,
    schema.EV_SAMPLE_ORDER: schema.SampleOrderEvent,
    schema.EV_START_READINESS: schema.StartReadinessEvent,
    schema.EV_START_READINESS_SKIPPED: schema.StartReadinessSkippedEvent,
    schema.EV_STARTUP_PROFILE: schema.StartupProfileEvent,
    schema.EV_ACCEL: schema.AccelEvent,
    schema.EV_TAKEOVER: schema.TakeoverEvent,
    schema.EV_TUNE_LOOP: schema.TuneLoopEvent,
    schema.EV_TUNE_LOADER: schema.TuneLoaderEvent,
    schema.EV_TRIAL_START: schema.TrialStartEvent,
    schema.EV_TRIAL_END: schema.TrialEndEvent,
    schema.EV_TRIAL_SKIPPED: schema.TrialSkippedEvent,
    schema.EV_TUNE_CONFIRM: schema.TuneConfirmEvent,
    schema.EV_TUNE_WORKERS_STOP: schema.TuneWorkersStopEvent,
    schema.EV_SCAN_START: schema.ScanStartEvent,
    schema.EV_SCAN_PROGRESS: schema.ScanProgressEvent,
    schema.EV_SCAN_BAD: schema.ScanBadEvent,
    schema.EV_SCAN_ERROR: schema.ScanErrorEvent,
    schema.EV_SCAN_SKIPPED: schema.ScanSkippedEvent,
    schema.EV_SCAN_END: schema.ScanEndEvent,
}


def event_problem(record: Any) -> str | None:
    """What makes one line of events.jsonl unreadable, or None."""
    if not isinstance(record, dict) or not isinstance(record.get("ev"), str):
        return "no event kind" if isinstance(record, dict) else f"a {type(record).__name__}, not an object"
    kind = record["ev"]
    return typed_dict_problem(record, EVENT_TYPES.get(kind, schema.Event), EVENT_REQUIRED.get(kind, ()))


def sample_problem(record: Any) -> str | None:
    """What makes one line of samples.jsonl unreadable, or None."""
    kind = record.get("k") if isinstance(record, dict) else None
    return typed_dict_problem(record, schema.Sample, SAMPLE_REQUIRED.get(kind, ()) if isinstance(kind, str) else ())


def field_checker(record_type: type) -> Callable[[str, Any], str | None]:
    """For a JSON object file (meta.json, result.json): why one field does not fit its type, or None."""
    hints = _hints(record_type)

    def problem(key: str, value: Any) -> str | None:
        return _field_problem(key, value, hints[key]) if key in hints and not conforms(value, hints[key]) else None

    return problem
