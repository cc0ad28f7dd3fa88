"""rundir/validate.py's checkers, worked out once per type, answer as the plain recursive reading of a type does."""

from __future__ import annotations

import math
import types
import typing
from typing import Any, Union

from hypothesis import given, settings
from hypothesis import strategies as st

from dlprobe.rundir import schema, validate


def reference(value: Any, annotation: Any) -> bool:
    """The type check as it read before it was compiled: the definition the fast one must keep."""
    if annotation is Any:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(reference(value, arm) for arm in typing.get_args(annotation))
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return isinstance(value, list) and all(reference(v, item) for v in value)
    if origin is dict:
        _, item = typing.get_args(annotation) or (Any, Any)
        return isinstance(value, dict) and all(reference(v, item) for v in value.values())
    if typing.is_typeddict(annotation):
        hints = typing.get_type_hints(annotation, vars(schema))
        return (
            isinstance(value, dict)
            and all(key in value for key in annotation.__required_keys__)
            and all(reference(v, hints[k]) for k, v in value.items() if k in hints)
        )
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
    return True


# Every field type of every record type the run directory's files hold.
ANNOTATIONS = sorted(
    {
        hint
        for obj in vars(schema).values()
        if isinstance(obj, type) and typing.is_typeddict(obj)
        for hint in typing.get_type_hints(obj, vars(schema)).values()
    },
    key=repr,
)

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=3)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
)


def outcome(check: Any, value: Any, annotation: Any) -> bool | type[Exception]:
    try:
        return bool(check(value, annotation))
    except OverflowError:  # an int too large for a float: both raise
        return OverflowError


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_each_field_type_is_checked_as_the_reference_checks_it(value: Any) -> None:
    for annotation in ANNOTATIONS:
        assert outcome(validate.conforms, value, annotation) == outcome(reference, value, annotation), annotation


def test_the_cases_a_reader_relies_on() -> None:
    assert not validate.conforms(True, int) and not validate.conforms(True, float)
    assert not validate.conforms(float("nan"), float) and validate.conforms(3, float)
    assert not validate.conforms([1.0, "2"], list[float]) and validate.conforms([1, 2.5], list[float])
    assert validate.conforms(None, float | None) and not validate.conforms("x", float | None)
    row = {"ev": "batches", "t": 1.0, "loader": 0, "waits": [0.1, "slow"]}
    assert validate.event_problem(row) == "'waits' is a list"


def test_every_event_kind_has_its_type_and_tunes_records_are_checked_at_load():
    from dlprobe.rundir import schema
    from dlprobe.rundir.validate import EVENT_TYPES, event_problem

    kinds = {v for k, v in vars(schema).items() if k.startswith("EV_")}
    assert kinds - set(EVENT_TYPES) == set()
    spec = {"key": "w2-p2-nopin", "num_workers": 2, "prefetch_factor": 2, "pin_memory": False, "stage": "workers"}
    end = {"ev": "trial_end", "t": 3.0, **spec, "status": "ok", "error": None, "batches": 60, "samples": 1920,
           "samples_per_s": 640.5, "loader_id": 1, "workers_that_fit_memory": None}  # fmt: skip
    assert event_problem(end) is None
    # a trial measured again (tune's confirmation) carries no search step's reason or prediction
    assert event_problem(end | {"search_reason": None, "predicted_samples_per_s": None}) is None
    assert event_problem(end | {"samples_per_s": "fast"}) == "'samples_per_s' is a string"
    assert event_problem({k: v for k, v in end.items() if k != "key"}) == "no 'key'"
    assert event_problem({"ev": "tune_workers_stop", "t": 1.0, "reason": "cap", "top": 4.5}) == "'top' is a number"
