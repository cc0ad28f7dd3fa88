"""quiet_signals.held_back: a SIGCHLD handler that raises (as torch's does) cannot raise inside the probe's record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dlprobe.in_training import quiet_signals


class WorkerKilled(RuntimeError):
    pass


@pytest.fixture
def raising_sigchld_handler():
    calls: list[int] = []

    def handler(signum, frame):
        calls.append(signum)
        raise WorkerKilled("DataLoader worker (pid N) is killed by signal: Segmentation fault.")

    previous = signal.signal(signal.SIGCHLD, handler)
    yield handler, calls
    signal.signal(signal.SIGCHLD, previous)


def _child_exits() -> None:
    """A real child process ends and is reaped: the kernel sends SIGCHLD, Python runs the handler at once."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    for _ in range(1000):  # bytecodes, between which Python runs the handler of a signal that came
        pass
    child.wait()


def test_a_child_that_ends_during_the_record_runs_the_handler_after_it_and_nothing_is_raised(raising_sigchld_handler):
    handler, calls = raising_sigchld_handler
    with quiet_signals.held_back():
        _child_exits()
        assert calls == []
    assert calls == [signal.SIGCHLD]
    assert signal.getsignal(signal.SIGCHLD) is handler


def test_without_it_the_handler_raises_where_the_code_is(raising_sigchld_handler):
    with pytest.raises(WorkerKilled):
        _child_exits()


def test_the_records_own_exception_still_propagates(raising_sigchld_handler):
    handler, _ = raising_sigchld_handler
    with pytest.raises(KeyError), quiet_signals.held_back():
        raise KeyError("the probe's own failure is its caller's to record")
    assert signal.getsignal(signal.SIGCHLD) is handler
