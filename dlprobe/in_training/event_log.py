"""Append-only JSON-lines event log shared by the training process and its workers."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dlprobe.redact import redact_fields
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import EV_PROBE_ERROR, RUN_DIR_ENV


class EventLog:
    """Writes one JSON object per line with a single O_APPEND write, so lines never interleave."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.fspath(RunDir(run_dir).events)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        self.lost = 0  # lines that could not be written, told in the next line that can
        self.lost_error: OSError | None = None

    def emit(self, ev: str, **fields: Any) -> None:
        try:
            os.write(self._fd, _line(ev, fields))
        except OSError as exc:
            # A full disk must never break the training run: count what is lost and say so once writes work again.
            self.lost += 1
            # Without its traceback: the frames it holds (the training loop's, the DataLoader iterator in them) would
            # stay alive for the rest of the run, and that iterator's workers with them.
            self.lost_error = exc.with_traceback(None)
            return
        if self.lost:
            lost, self.lost = self.lost, 0
            note = {
                "where": "event_log.write",
                "type": type(self.lost_error).__name__,
                "message": str(self.lost_error)[:500],
                "consequence": f"{lost} event(s) of this process were lost",
                "count": lost,
            }
            try:
                os.write(self._fd, _line(EV_PROBE_ERROR, note))
            except OSError:
                self.lost += lost  # still failing: keep the count for the next try

    def close(self) -> None:
        os.close(self._fd)


def _line(ev: str, fields: dict[str, Any]) -> bytes:
    # Redacted here, as it is written: whatever copied an exception's message or a worker's error into an event
    # (the sample check, a batch that could not be sent, the probe's own errors), no file of the run holds its
    # credentials (dlprobe/redact.py, TEXT_FIELDS). The fields that hold none cost a set lookup each.
    record = {"ev": ev, "t": time.time(), "pid": os.getpid(), **redact_fields(fields)}
    return (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()


_log: EventLog | None = None
# Why the log could not be opened: no event can say it, so the supervisor notices the missing "start" event
# (probe-degraded) instead of concluding that the script made no loader; kept here for the in-process API.
open_error: OSError | None = None


def get_log() -> EventLog | None:
    """The process-wide event log, opened lazily from $DLPROBE_RUN_DIR (None outside a probe)."""
    global _log, open_error
    if _log is None and open_error is None:
        run_dir = os.environ.get(RUN_DIR_ENV)
        if run_dir:
            try:
                _log = EventLog(run_dir)
            except OSError as exc:
                open_error = exc.with_traceback(None)  # tried once: a per-event retry would cost a failing open()
                return None
    return _log


def emit(ev: str, **fields: Any) -> None:
    """Write one event to the process-wide log, where there is one (outside a probe: nothing)."""
    log = get_log()
    if log is not None:
        log.emit(ev, **fields)
