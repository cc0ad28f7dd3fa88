"""Keeps the probe's frames out of the user's tracebacks: in the training process and in worker processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, cast

from dlprobe.frames import PROBE_DIR, is_probe_file

FrameFilter = Callable[[TracebackType], bool]


def _is_own(tb: TracebackType) -> bool:
    # dlprobe's frames, and runpy's (a spawned worker starts through it)
    return is_probe_file(tb.tb_frame.f_code.co_filename)


def is_dlprobe_frame(tb: TracebackType) -> bool:
    """dlprobe's frames only: where the user's own command ran runpy (`python -m`), its frames are the user's."""
    return tb.tb_frame.f_code.co_filename.startswith(PROBE_DIR)


def user_frames(tb: TracebackType | None, drop: FrameFilter = _is_own) -> TracebackType | None:
    """The traceback without any of the probe's (or runpy's) frames, wherever they sit in it."""
    kept: list[TracebackType] = []
    while tb is not None:
        if not drop(tb):
            kept.append(tb)
        tb = tb.tb_next
    cleaned: TracebackType | None = None
    for entry in reversed(kept):
        cleaned = TracebackType(cleaned, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return cleaned


def clean_chain(exc: BaseException | None, drop: FrameFilter = _is_own) -> None:
    """Strip the probe's frames from an exception and from every exception chained to it (cause, context)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = user_frames(current.__traceback__, drop)
        todo.extend((current.__cause__, current.__context__))
        todo.extend(getattr(current, "exceptions", ()) or ())  # ExceptionGroup members


def patch_exception_wrapper() -> None:
    """In a worker: torch formats the worker's traceback into text (ExceptionWrapper) that the training loop
    re-raises as 'Caught X in DataLoader worker process N'; clean the traceback before it is formatted."""
    from torch import _utils

    wrapper = _utils.ExceptionWrapper
    if getattr(wrapper, "_dlprobe_patched", False):
        return
    original_init = cast(Callable[..., None], wrapper.__init__)

    def __init__(self: Any, exc_info: Any = None, where: str = "in background") -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        if exc_info[1] is not None:
            clean_chain(exc_info[1])
            exc_info = (exc_info[0], exc_info[1], user_frames(exc_info[2]))
        original_init(self, exc_info, where)

    wrapper.__init__ = __init__  # type: ignore[method-assign]
    wrapper._dlprobe_patched = True  # type: ignore[attr-defined]
