"""Records the exception that ends a probed process as its `script_error` event: the script, or a launcher's rank."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

from dlprobe.frames import innermost_user_frame
from dlprobe.in_training import elastic_error, identity, probe_errors, quiet_signals
from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.tracebacks import clean_chain, is_dlprobe_frame, user_frames
from dlprobe.redact import redact_text
from dlprobe.rundir.schema import EV_SCRIPT_ERROR

# The process whose sys.excepthook records; a forked child (a DataLoader worker) inherits the hook but never
# ends through it, and must not record as if it were the rank.
_watching_pid: int | None = None
_recorded_pid: int | None = None  # the process that recorded its ending exception (once is enough)


def record(exc: BaseException) -> None:
    """One script_error event for an exception that ends this process (never for Ctrl-C: that is the user's)."""
    global _recorded_pid
    log = get_log()
    if log is None or isinstance(exc, KeyboardInterrupt):
        return
    _recorded_pid = os.getpid()
    tb = exc.__traceback__
    frames = traceback.extract_tb(tb) if tb is not None else []
    # Where the user's code raised it: the innermost frame of theirs (torch's re-raise of a worker's error, or a
    # library's own raise, is not where they can fix it); the innermost frame when none is theirs.
    where = innermost_user_frame(frames)
    try:  # which rank failed, for a rank that dies before it says who it is with its first loader
        who = identity.current()
    except Exception as exc_who:
        probe_errors.record("script_errors.identity", exc_who, "the script error is not tied to a rank")
        who = {}
    log.emit(
        EV_SCRIPT_ERROR,
        rank=who.get("rank"),
        node_rank=who.get("node_rank"),
        type=type(exc).__name__,
        message=redact_text(str(exc)[:4000]),  # a token in the message (a 401 naming it) stays out of the run
        file=where.filename if where else getattr(exc, "filename", None),
        line=where.lineno if where else getattr(exc, "lineno", None),
    )


def launched_rank() -> bool:
    """A rank started by a launcher (torchrun, Lightning): the launcher sets these for its children only."""
    return "LOCAL_RANK" in os.environ or "RANK" in os.environ


def watch_uncaught(flush: Callable[[], None]) -> None:
    """In a probed process (the script `dlprobe run` started, a torchrun rank, a rank Lightning re-launched, a script
    under `dlprobe run -- ...`), wrap sys.excepthook so the exception that ends it is recorded and printed without
    dlprobe's frames. Python calls the hook after the script's frames are gone, so python's own exit status follows
    (1, or death by SIGINT for a KeyboardInterrupt), and a hook the script sets later wraps this one. Once per
    process."""
    global _watching_pid
    if _watching_pid == os.getpid():
        return
    _watching_pid = os.getpid()
    inner = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
        if os.getpid() == _watching_pid:
            try:
                with quiet_signals.held_back():  # a worker dying meanwhile (torch's SIGCHLD) must not cut the record
                    flush()  # the batches before the error come first in the log
                    clean_chain(exc, is_dlprobe_frame)
                    tb = user_frames(tb, is_dlprobe_frame)
                    record(exc.with_traceback(tb))
                    elastic_error.write_cause(exc)  # a torchrun rank: the DataLoader cause in torchrun's summary
            except Exception as probe_exc:
                probe_errors.record("script_errors.hook", probe_exc, "the exception that ended it is not recorded")
        return inner(exc_type, exc, tb)

    sys.excepthook = hook
    _watch_unraisable()


def _has_dlprobe_frame(tb: TracebackType | None) -> bool:
    while tb is not None:
        if is_dlprobe_frame(tb):
            return True
        tb = tb.tb_next
    return False


def _watch_unraisable() -> None:
    """An exception Python cannot raise (in a `__del__`, a weakref callback) is printed by sys.unraisablehook with
    its traceback: "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ ...>" after a Ctrl-C
    during the workers' shutdown ran through dlprobe's wrapper of `_shutdown_workers`, whose frame showed there.
    Printed as before, without dlprobe's frames; a hook the script sets later replaces this one."""
    inner = sys.unraisablehook

    def hook(unraisable: Any) -> Any:
        try:
            tb = unraisable.exc_traceback
            if _has_dlprobe_frame(tb):
                exc = unraisable.exc_value
                if exc is not None:
                    clean_chain(exc, is_dlprobe_frame)
                unraisable = type(unraisable)((unraisable.exc_type, exc, user_frames(tb, is_dlprobe_frame),
                                               unraisable.err_msg, unraisable.object))  # fmt: skip
        except Exception as probe_exc:  # printed as Python has it, frames and all
            probe_errors.record("script_errors.unraisable", probe_exc, "an ignored exception kept dlprobe's frames")
        return inner(unraisable)

    sys.unraisablehook = hook


def record_unhandled_at_exit(flush: Callable[[], None]) -> None:
    """An atexit handler's fallback for a script that replaced sys.excepthook without calling the previous one:
    python still sets sys.last_value to the uncaught exception before it calls the hook."""
    exc = getattr(sys, "last_value", None)
    if exc is None or _recorded_pid == os.getpid() or _watching_pid != os.getpid():
        return
    try:
        with quiet_signals.held_back():
            flush()
            clean_chain(exc, is_dlprobe_frame)
            record(exc)
            elastic_error.write_cause(exc)
    except Exception as probe_exc:
        probe_errors.record("script_errors.at_exit", probe_exc, "the exception that ended it is not recorded")
