"""dlprobe's own checks still running when the training ends: the sample check's checker works in the background
(in_training/sample_check.py), so that the training's exception is never held up by it, and the training often ends
by that very exception. The report waits for what the checker finds, bounded, and stops a checker that outlives
the bound (its outcome is then missing, and said so).

A checker is known by its name (CHECK_PROCESS_NAME, set before it is forked) and by its environment, the training's
own: it names this run directory. Nothing else's process is touched."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from dlprobe.rundir.schema import CHECK_PROCESS_NAME, RUN_DIR_ENV

# The checker's own bounds (the workers' quiet wait and one load, in_training/sample_check.py), with room to write
WAIT_S = 20.0
_POLL_S = 0.05


def running(run_dir: str) -> list[int]:
    """The pids of this run's checkers alive now."""
    wanted = f"{RUN_DIR_ENV}={run_dir}".encode()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/comm", "rb") as comm:
                if comm.read().strip() != CHECK_PROCESS_NAME.encode():
                    continue
            with open(f"/proc/{name}/environ", "rb") as environ:
                if wanted in environ.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # noqa: S112 - gone, or another user's: not this run's checker
            continue
    return found


def wait_for(run_dir: str, timeout: float = WAIT_S) -> list[int]:
    """Wait until this run's checkers are done; the pids that were still running at the timeout, now stopped."""
    deadline = time.monotonic() + timeout
    pids = running(run_dir)
    while pids and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        pids = running(run_dir)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return pids
