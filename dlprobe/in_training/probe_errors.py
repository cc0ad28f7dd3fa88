"""The probe's own failures inside the target: recorded as `probe_error` events, rate-limited, never raised."""

from __future__ import annotations

import os

from dlprobe.rundir.schema import EV_PROBE_ERROR

# A failure on the per-batch path repeats every batch: one event at the first, then at 10, 100, 1000, ...
# occurrences (and the final count at exit), so the log holds the count and not a million copies.
_counts: dict[str, int] = {}
_emitted: dict[str, int] = {}
_info: dict[str, tuple[str, str, str]] = {}


def _due(count: int) -> bool:
    while count % 10 == 0 and count > 1:
        count //= 10
    return count == 1


def record(where: str, exc: BaseException, consequence: str) -> None:
    """Note that the probe part `where` failed with `exc`, and what the report will lack because of it."""
    count = _counts.get(where, 0) + 1
    _counts[where] = count
    _info[where] = (type(exc).__name__, str(exc)[:500], consequence)
    if _due(count):
        _emit(where)


def _emit(where: str) -> None:
    from dlprobe.in_training.event_log import get_log

    log = get_log()
    if log is None:
        return
    exc_type, message, consequence = _info[where]
    _emitted[where] = _counts[where]
    log.emit(
        EV_PROBE_ERROR,
        where=where,
        type=exc_type,
        message=message,
        consequence=consequence,
        count=_counts[where],
    )


def flush() -> None:
    """Write the final count of every failure that repeated since its last event (at exit)."""
    for where, count in list(_counts.items()):
        if _emitted.get(where) != count:
            _emit(where)


def _forget_in_child() -> None:
    # A forked worker starts its own count: its failures are its own, reported with its pid.
    _counts.clear()
    _emitted.clear()
    _info.clear()


os.register_at_fork(after_in_child=_forget_in_child)
