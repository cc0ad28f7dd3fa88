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
    schema.EV_SCRIPT_ERROR: ("t",),
}
SAMPLE_REQUIRED: dict[str, tuple[str, ...]] = {
    schema.SAMPLE_PROC: ("pid",),
    schema.SAMPLE_READING: ("t",),
    schema.SAMPLE_GONE: ("pid", "t"),
    schema.SAMPLE_THREAD: ("pid", "tid"),
}


@cache
def _hints(record_type: type) -> dict[str, Any]:
    return typing.get_type_hints(record_type, vars(schema))


def conforms(value: Any, annotation: Any) -> bool:
    """Whether a JSON value fits a type of schema.py (int, float, str, bool, None, unions, list[...], dict[str, ...],
    TypedDicts: their present keys; Any fits everything). A JSON number is no bool, and no NaN counts as a float."""
    if annotation is Any:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arm) for arm in typing.get_args(annotation))
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if origin is dict:
        _, item = typing.get_args(annotation) or (Any, Any)
        return isinstance(value, dict) and all(conforms(v, item) for v in value.values())
    if typing.is_typeddict(annotation):
        return isinstance(value, dict) and typed_dict_problem(value, annotation) is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if annotation is str:
        return isinstance(value, str)
    if annotation is list or annotation is dict:
        return isinstance(value, annotation)
    return True  # a type this checker does not know: the readers' own problem, as before


def typed_dict_problem(record: Any, record_type: type, required: tuple[str, ...] = ()) -> str | None:
    """What is wrong with a record (None if nothing): not an object, a required field missing, a field of the wrong
    type. Fields the type does not name are left alone (a newer writer may add some)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    hints = _hints(record_type)
    for key in (*record_type.__required_keys__, *required):  # type: ignore[attr-defined]
        if key not in record:
            return f"no {key!r}"
    for key, value in record.items():
        if key in hints and not conforms(value, hints[key]):
            return _field_problem(key, value, hints[key])
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
    schema.EV_STOP: schema.StopEvent,
    schema.EV_PROCESS: schema.ProcessEvent,
    schema.EV_LOADER: schema.LoaderEvent,
    schema.EV_START_METHOD: schema.StartMethodEvent,
    schema.EV_EPOCH: schema.EpochEvent,
    schema.EV_BATCHES: schema.BatchesEvent,
    schema.EV_EPOCH_END: schema.EpochEndEvent,
    schema.EV_WORKER_BATCHES: schema.WorkerBatchesEvent,
    schema.EV_WORKERS_LAST: schema.WorkersLastEvent,
    schema.EV_BATCH_INFO: schema.BatchInfoEvent,
    schema.EV_LOADER_ERROR: schema.LoaderErrorEvent,
    schema.EV_PROBE_ERROR: schema.ProbeErrorEvent,
    schema.EV_DUPES: schema.DupesEvent,
    schema.EV_FORK_STATE: schema.ForkStateEvent,
    schema.EV_STARTUP_PROFILE: schema.StartupProfileEvent,
    schema.EV_ACCEL: schema.AccelEvent,
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
