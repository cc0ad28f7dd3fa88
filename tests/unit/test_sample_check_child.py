"""The child that loads a sample alone (in_training/sample_check.py): what it reports for a sample that loads, fails,
crashes or hangs, and that nothing it does reaches the parent (its output, its exit, a process left behind)."""

from __future__ import annotations

import os
import signal
import time

import psutil

from dlprobe.in_training import sample_check


class Rows:
    def __getitem__(self, i):
        print(f"loading {i}", flush=True)  # the child's output must not reach the training's terminal
        if i == 5:
            raise ValueError(f"corrupt record {i}")
        if i == 6:
            os.kill(os.getpid(), signal.SIGSEGV)
        if i == 7:
            time.sleep(60)
        if i == 8:
            raise OSError("Can't synchronously read data")
        return i


class Broken(Rows):
    def __getitem__(self, i):
        raise OSError("Can't synchronously read data")  # every index: state, not a sample


def test_a_sample_that_loads_alone(capfd):
    result = sample_check._load_in_child(Rows(), 3, 2)
    assert result["outcome"] == "loads" and "control_loads" not in result
    assert capfd.readouterr() == ("", "")


def test_a_sample_that_fails_alone_while_its_control_loads():
    result = sample_check._load_in_child(Rows(), 5, 4)
    assert result["outcome"] == "fails" and result["error_alone"] == "ValueError: corrupt record 5"
    assert result["control_loads"] is True


def test_every_index_failing_alike_is_not_the_sample():
    result = sample_check._load_in_child(Broken(), 5, 4)
    assert result["outcome"] == "fails-any" and result["control_loads"] is False


def test_a_crash_alone_is_a_failure_with_its_signal():
    result = sample_check._load_in_child(Rows(), 6, 4)
    assert result["outcome"] == "fails" and result["error_type_alone"] == "SIGSEGV"


def test_a_hang_alone_is_not_verified_and_the_child_is_gone(monkeypatch):
    monkeypatch.setattr(sample_check, "LOAD_LIMIT_S", 1.0)
    # Children of this process that other tests left (pytest-xdist runs many tests in one process) are not its.
    before = {child.pid for child in psutil.Process().children()}
    result = sample_check._load_in_child(Rows(), 7, 4)
    assert result["outcome"] == "unverified" and "did not finish within 1 s" in result["reason"]
    # Reaped: no zombie, no new child left (a zombie is still listed as a child until it is reaped).
    assert {child.pid for child in psutil.Process().children()} <= before
