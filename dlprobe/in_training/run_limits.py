"""Ends a bounded run from inside the target (`dlprobe check`): after N batches or at a deadline."""

from __future__ import annotations

import os
import threading
import time

from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_STOP, STOP_AFTER_BATCHES_ENV, STOP_AT_ENV


class RunLimits:
    """Checked before each batch is fetched, so the script has trained on exactly the batches it was given."""

    def __init__(self, max_batches: int | None, deadline: float | None) -> None:
        self.max_batches = max_batches
        self.deadline = deadline
        self.active = max_batches is not None or deadline is not None
        self.stopped = False

    @classmethod
    def from_env(cls) -> RunLimits:
        batches = os.environ.get(STOP_AFTER_BATCHES_ENV)
        deadline = os.environ.get(STOP_AT_ENV)
        try:
            return cls(int(batches) if batches else None, float(deadline) if deadline else None)
        except ValueError:
            return cls(None, None)

    def enforce(self, batches: int) -> None:
        """Raise SystemExit(0) once a limit is reached: the loop unwinds, `finally` blocks run, workers shut down.

        Only the main thread is stopped this way; a loop in another thread gets the event written and the
        supervisor interrupts the process instead.
        """
        if self.stopped:
            return
        if self.max_batches is not None and batches >= self.max_batches:
            reason = "max_batches"
        elif self.deadline is not None and time.time() >= self.deadline:
            reason = "max_seconds"
        else:
            return
        self.stopped = True
        exiting = threading.current_thread() is threading.main_thread()
        log = get_log()
        if log is not None:
            # `exiting`: the process is unwinding on its own; the supervisor then waits for it longer before a signal
            log.emit(EV_STOP, reason=reason, batches=batches, exiting=exiting)
        if exiting:
            raise SystemExit(0)


LIMITS = RunLimits.from_env()
