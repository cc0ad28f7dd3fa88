"""The probe's frames are cut from tracebacks wherever they sit, chained exceptions included."""

from __future__ import annotations

import traceback

from dlprobe.in_training import tracebacks


def _user_raises() -> None:
    raise ValueError("bad row")


def _probe_calls(fn) -> None:  # stands in for a fetch wrapper in dlprobe/in_training
    fn()


_probe_calls.__code__ = _probe_calls.__code__.replace(co_filename=tracebacks.__file__)


def test_probe_frames_in_the_middle_and_in_the_cause_are_cut():
    try:
        try:
            _probe_calls(_user_raises)
        except ValueError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        caught = exc
    assert "in _probe_calls" in "".join(traceback.format_exception(caught))
    tracebacks.clean_chain(caught)
    text = "".join(traceback.format_exception(caught))
    assert "in _probe_calls" not in text and "in_training" not in text
    assert "_user_raises" in text and "ValueError: bad row" in text and "RuntimeError: outer" in text
