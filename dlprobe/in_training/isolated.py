"""Run a read-only inspection of the training process's objects in a forked copy of it, so that what the inspection
allocates (a pickler's memo, a walk's containers), the collections it would set off and anything a user object does
when it is pickled stay in the copy: the training's memory, its garbage collector and its objects are as they were.

The copy leaves with os._exit: no atexit handler, no flush of the script's own stdio buffers (its output would be
printed twice), no finalizer of the script's. Its result comes back as JSON on a pipe. Its exit's SIGCHLD is kept
from the script's handler (in_training/quiet_fork.py). A copy that stops making progress (a lock another thread held
at the fork stays held in the copy forever) is stopped after STALL_S without CPU time, not at the time limit: the
readiness check (run detached from the training, in_training/detached.py) then says why within a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
import warnings
from collections.abc import Callable
from typing import Any

from dlprobe.in_training import quiet_fork
from dlprobe.system.procmem import parse_stat

_READ_CHUNK = 1 << 16
STALL_S = 1.0  # a copy that used no CPU time for this long is blocked: stopped
_POLL_S = 0.1
_FAILED = "__inspection_failed__"


def run_in_child(inspect: Callable[[], dict[str, Any]], timeout_s: float) -> tuple[dict[str, Any] | None, str | None]:
    """(inspect()'s result, None), or (None, why it is missing): the copy failed, timed out (it is killed) or the
    process cannot fork."""
    with quiet_fork.sigchld_kept_from_script():
        return _fork_and_wait(inspect, timeout_s)


def _fork_and_wait(inspect: Callable[[], dict[str, Any]], timeout_s: float) -> tuple[dict[str, Any] | None, str | None]:
    read_end, write_end = os.pipe()
    try:
        with warnings.catch_warnings():  # 3.12+ warns of fork() beside threads; the copy only reads and leaves
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return None, f"could not fork a copy to inspect in: {exc}"
    if pid == 0:  # the copy
        status = 1
        try:
            os.close(read_end)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the training's, not the copy's
            quiet_fork.name_as_check()
            try:
                answer = inspect()
            except Exception as exc:  # said to the training's probe, which records it: never printed here
                answer = {_FAILED: f"{type(exc).__name__}: {exc}"[:300]}
            data = json.dumps(answer, default=str).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks: list[bytes] = []
    started = time.monotonic()
    deadline = started + timeout_s
    why: str | None = None
    progress = (_progress(pid)[0], started)
    try:
        while True:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                why = f"the inspection took over {timeout_s:g} s and was stopped"
                break
            ready, _, _ = select.select([read_end], [], [], min(left, _POLL_S))
            if not ready:
                ticks, runnable = _progress(pid)
                if ticks is None or ticks != progress[0] or runnable:  # waiting for a CPU is not blocked
                    progress = (ticks, time.monotonic())
                elif time.monotonic() - progress[1] >= STALL_S:
                    why = (
                        f"the copy used no CPU for {STALL_S:g} s (blocked, likely on a lock another thread held at the "
                        "fork) and was stopped"
                    )
                    break
                continue
            chunk = os.read(read_end, _READ_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if why is not None:
            _kill(pid)
        status = _reap(pid)
    if why is not None:
        return None, why
    if status != 0:
        return None, f"the inspecting copy ended with status {status}"
    try:
        result = json.loads(b"".join(chunks))
    except ValueError as exc:
        return None, f"the inspecting copy's answer was unreadable: {exc}"
    if not isinstance(result, dict):
        return None, "the inspecting copy's answer was not a record"
    if _FAILED in result:
        return None, f"the inspection failed: {result[_FAILED]}"
    return result, None


def _progress(pid: int) -> tuple[float | None, bool]:
    """(the copy's CPU seconds, whether it is runnable now), from one read of /proc/PID/stat (None: not read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None, False
    read = parse_stat(data)
    state = data[data.rfind(b")") + 2 : data.rfind(b")") + 3]
    return (read[2] if read else None), state == b"R"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended as the deadline passed
        os.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> int:
    """The copy's exit status; it is always waited for, so it never lingers as a zombie of the training."""
    try:
        _, status = os.waitpid(pid, 0)  # retried on a signal by Python itself (PEP 475)
    except ChildProcessError:  # a SIGCHLD handler of the script's reaped it first
        return 0
    return os.waitstatus_to_exitcode(status)
