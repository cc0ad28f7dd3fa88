"""Bounds a checked run from the supervisor: the batch and time limits, and the stop that follows.

Hangs are not handled here: `dlprobe run`'s hang guard (dlprobe/hang/) dumps the stacks and stops the tree.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from dlprobe.rundir.schema import EV_STOP, STOP_AFTER_BATCHES_ENV, STOP_AT_ENV
from dlprobe.system.proctree import kill_tree

HOOK_GRACE_S = 3.0  # the hooks stop the loop cleanly at its next batch; signals only if that does not happen
# Once the hooks said the process is exiting (SystemExit raised in the main thread), its workers are shut down and
# the interpreter torn down: seconds on a busy machine, and a SIGINT then would only break a clean exit.
EXIT_GRACE_S = 15.0
SIGNAL_STEP_S = 5.0  # then SIGINT, SIGTERM and SIGKILL, this far apart


@dataclass
class Stop:
    """Why dlprobe ended the run early; for a hang, the measured stall (no batch for `stall_s`, taken from the
    hang record) and the loader and worker the loop was waiting on, each None when the record does not say."""

    reason: str  # max_batches | max_seconds | hang
    at: float
    stall_s: float | None = None
    loader_id: int | None = None
    signals: tuple[str, ...] = ()
    worker_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "at": round(self.at, 3),
            "stall_s": None if self.stall_s is None else round(self.stall_s, 3),
            "loader_id": self.loader_id,
            "worker_id": self.worker_id,
            "signals": list(self.signals),
        }


class RunWatch:
    """Folds the target's events each supervisor tick; asks it to stop at a limit, then insists."""

    def __init__(self, max_batches: int | None, max_seconds: float | None) -> None:
        self.max_batches = max_batches
        self.deadline = time.time() + max_seconds if max_seconds is not None else None
        self.stop: Stop | None = None
        self.escalate_at = 0.0
        self.sent: list[str] = []

    def env(self) -> dict[str, str]:
        """What the hooks inside the target need to stop the loop themselves."""
        env = {}
        if self.max_batches is not None:
            env[STOP_AFTER_BATCHES_ENV] = str(self.max_batches)
        if self.deadline is not None:
            env[STOP_AT_ENV] = repr(self.deadline)
        return env

    def _fold(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            if ev.get("ev") != EV_STOP:
                continue
            grace = EXIT_GRACE_S if ev.get("exiting") else HOOK_GRACE_S
            if self.stop is None:
                self._request(Stop(str(ev.get("reason")), ev["t"]), ev["t"] + grace)
            elif not self.sent:  # the supervisor's own deadline came first, then the hooks stopped the loop
                self.escalate_at = max(self.escalate_at, ev["t"] + grace)

    def _request(self, stop: Stop, escalate_at: float) -> None:
        self.stop = stop
        self.escalate_at = escalate_at

    def on_tick(self, now: float, events: list[dict[str, Any]], child: subprocess.Popen[bytes]) -> None:
        self._fold(events)
        if self.stop is None and self.deadline is not None and now >= self.deadline:
            self._request(Stop("max_seconds", now), now + HOOK_GRACE_S)
        if self.stop is not None and now >= self.escalate_at:
            self._escalate(child)

    def _escalate(self, child: subprocess.Popen[bytes]) -> None:
        if child.poll() is not None:
            return
        step = len(self.sent)
        if step == 0:
            child.send_signal(signal.SIGINT)  # KeyboardInterrupt: the script's own cleanup runs
            self.sent.append("SIGINT")
        elif step == 1:
            child.send_signal(signal.SIGTERM)
            self.sent.append("SIGTERM")
        else:
            kill_tree(child.pid)
            self.sent.append("SIGKILL")
        assert self.stop is not None
        self.stop.signals = tuple(self.sent)
        self.escalate_at = time.time() + SIGNAL_STEP_S
