"""`dlprobe run --start-method M`: every DataLoader with workers starts them with M, whatever the script chose.

Set as the loader's `multiprocessing_context` as the loader is iterated (before its workers exist, so the loader
event and the workers see the forced method); the script's own choice is recorded beside it, so the report says
what was overridden. "thread" sets torch's `worker_method="thread"` where the installed DataLoader has it, and
records once per loader that it could not be applied where it has not.
"""

from __future__ import annotations

import os
from typing import Any

from dlprobe.rundir.schema import START_METHOD_CHOICES, START_METHOD_ENV

THREAD = "thread"


def forced_method() -> str | None:
    """The method --start-method asked for, or None (not asked, or a value the supervisor would have refused)."""
    method = os.environ.get(START_METHOD_ENV, "")
    return method if method in START_METHOD_CHOICES else None


def script_choice(loader: Any) -> str | None:
    """The start method the script itself gave this loader, or None where it named none (the default applies)."""
    ctx = getattr(loader, "multiprocessing_context", None)
    return str(ctx.get_start_method()) if ctx is not None else None


def current_method(loader: Any) -> str | None:
    """The start method the loader's workers get now: its own context's, else the process's default."""
    try:
        return script_choice(loader) or _default_method()
    except Exception:  # a loader whose context cannot be read: unknown, not a guess
        return None


def _default_method() -> str | None:
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()


def has_thread_workers(loader: Any) -> bool:
    """Whether the installed torch's DataLoader has thread workers (`worker_method`), known by the attribute."""
    return hasattr(loader, "worker_method")


def apply(loader: Any) -> dict[str, Any] | None:
    """Give `loader` the forced start method before its workers start; the fields of the one event per loader that
    says what was done (the caller adds the loader's id), or None (nothing forced, or already said)."""
    method = forced_method()
    if method is None or getattr(loader, "_dlprobe_forced", None) == method:
        return None
    own = script_choice(loader)
    fields: dict[str, Any] = {"forced": method, "script_choice": own, "default": None}
    try:
        fields["default"] = _default_method()
        if loader.num_workers <= 0:
            fields.update(applied=False, reason="the loader has no worker processes (num_workers=0)")
        elif method == THREAD:
            if has_thread_workers(loader):
                loader.worker_method = THREAD
                fields["applied"] = True
            else:
                import torch

                fields.update(
                    applied=False,
                    reason=f"this torch ({torch.__version__}) has no thread workers: its DataLoader has no "
                    "worker_method; the loader kept its own start method",
                )
        else:
            if has_thread_workers(loader) and getattr(loader, "worker_method", None) == THREAD:
                loader.worker_method = "multiprocessing"
            loader.multiprocessing_context = method
            fields["applied"] = True
    except Exception as exc:  # a loader that refuses the setting trains with its own method, and the report says so
        fields.update(applied=False, reason=f"{type(exc).__name__}: {str(exc)[:300]}")
    try:
        loader._dlprobe_forced = method  # one event per loader, not one per epoch
    except Exception:  # noqa: S110 - a loader that takes no attribute gets the event again next epoch: harmless
        pass
    return fields
