"""A check of dlprobe's that runs beside the training, never in its way: the training forks a go-between that forks
the check and exits, and reaps the go-between at once (its SIGCHLD kept from the script's handler), so the check is
no child of the training: nothing of its life reaches the script, and the training never waits for it. The check
runs in a session of its own (a Ctrl-C or the job's process-group signals are the training's), with its standard
streams on /dev/null, named `dlprobe-check` (the supervisor waits for it before the report: supervisor/own_checks.py)
and ended by os._exit, never back in the training's code. Used by the sample check and the start-method readiness
copy."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable

from dlprobe.in_training import quiet_fork
from dlprobe.rundir.schema import CHECK_PROCESS_NAME

BACKSTOP_S = 10  # past its own bounds a check is ended by SIGALRM: it never outlives them by much


# The checks this process started, by pid: `dlprobe.watch()` (no supervisor) waits for them before its report.
_started: list[int] = []


def start(work: Callable[[], None], bound_s: float) -> None:
    """Run `work` in a detached check process and return at once (ended by SIGALRM bound_s + BACKSTOP_S on)."""
    read_end, write_end = os.pipe()
    with quiet_fork.sigchld_kept_from_script():
        with warnings.catch_warnings():  # 3.12+ warns on fork() with threads: not on their stderr
            warnings.simplefilter("ignore", DeprecationWarning)
            between = os.fork()
        if between == 0:  # pragma: no cover - the go-between ends in os._exit
            try:
                os.close(read_end)
                quiet_fork.name_as_check()  # before the check exists: the supervisor finds it by this name
                os.setsid()
                check = os.fork()
                if check == 0:
                    os.close(write_end)
                    _run(work, bound_s)
                os.write(write_end, str(check).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with contextlib.suppress(ChildProcessError):  # a SIGCHLD handler of the script's reaped it first
            os.waitpid(between, 0)
    try:
        told = os.read(read_end, 32)
    finally:
        os.close(read_end)
    if told.isdigit():
        _started.append(int(told))


def _alive(pid: int) -> bool:
    """Whether `pid` is still one of these checks (by its name: once it ended the pid may be another's)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            return comm.read().strip() == CHECK_PROCESS_NAME.encode()
    except OSError:
        return False


def wait(timeout_s: float) -> list[int]:
    """Wait for the checks this process started; those still running at the timeout are stopped and returned."""
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in _started) and time.monotonic() < deadline:
        time.sleep(0.05)
    late = [pid for pid in _started if _alive(pid)]
    for pid in late:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _started.clear()
    return late


def _run(work: Callable[[], None], bound_s: float) -> None:  # pragma: no cover - runs in the detached process
    try:
        for sig in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.SIG_IGN)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the check ends in os._exit
        faulthandler.disable()
        signal.alarm(int(bound_s) + BACKSTOP_S)
        work()
    finally:
        os._exit(0)
