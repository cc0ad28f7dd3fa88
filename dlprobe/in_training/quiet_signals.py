"""Holds back torch's SIGCHLD handler while the probe records the exception that is ending the script."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """While the script's exception is being recorded, a worker that dies (the same failure, seen by torch's
    SIGCHLD handler in the main process) must not raise `RuntimeError: DataLoader worker (pid N) is killed by
    signal` from inside the probe's frames: that replaced the user's traceback with one ending in dlprobe's code
    and lost the record. Python runs a signal's handler between two bytecodes of the main thread, wherever it is,
    and blocking the signal in this thread is not enough (the kernel hands it to any other thread: torch's, the
    pin-memory one), so the Python-level handler itself is swapped for one that only notes the signal.

    Afterwards torch's handler gets the noted signal, and what it raises is dropped: the script already ends with
    its own exception, and plain python would have run the handler at the earliest after printing it (at exit)."""
    try:
        previous = signal.getsignal(signal.SIGCHLD)
    except (AttributeError, ValueError):  # no SIGCHLD on this platform
        yield
        return
    if not callable(previous):  # SIG_DFL / SIG_IGN / None: no Python code runs on SIGCHLD
        yield
        return
    noted: list[tuple[int, FrameType | None]] = []

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append((signum, frame))

    try:
        signal.signal(signal.SIGCHLD, note)
    except ValueError:  # not the main thread: Python runs no handler here either
        yield
        return
    try:
        yield
    finally:
        try:
            signal.signal(signal.SIGCHLD, previous)
            if noted:  # torch's handler checks its workers; a handler of the user's chained behind it runs too
                previous(*noted[0])
        except Exception:  # noqa: S110 - the script already ends with its own exception (see the docstring)
            pass
