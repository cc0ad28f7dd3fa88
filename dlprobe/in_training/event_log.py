"""Append-only JSON-lines event log shared by the training process and its workers."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dlprobe.rundir.env import RUN_DIR_ENV
from dlprobe.rundir.files import EVENTS_FILE


class EventLog:
    """Writes one JSON object per line with a single O_APPEND write, so lines never interleave."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.path.join(run_dir, EVENTS_FILE)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, ev: str, **fields: Any) -> None:
        record = {"ev": ev, "t": time.time(), "pid": os.getpid(), **fields}
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        try:
            os.write(self._fd, line.encode())
        except OSError:
            # A full disk must never break the training run; the probe just loses detail.
            pass

    def close(self) -> None:
        os.close(self._fd)


_log: EventLog | None = None


def get_log() -> EventLog | None:
    """The process-wide event log, opened lazily from $DLPROBE_RUN_DIR (None outside a probe)."""
    global _log
    if _log is None:
        run_dir = os.environ.get(RUN_DIR_ENV)
        if run_dir:
            try:
                _log = EventLog(run_dir)
            except OSError:
                return None
    return _log
