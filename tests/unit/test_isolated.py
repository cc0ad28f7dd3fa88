"""in_training/isolated.py: an inspection run in a forked copy leaves the training's memory as it was, its answer
comes back, and a copy past its deadline is killed and reaped (no zombie left to the training)."""

from __future__ import annotations

import os
import time

from dlprobe.in_training.isolated import run_in_child

_HELD: list[bytes] = []


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _allocate_200_mib() -> dict[str, int]:
    _HELD.append(b"x" * (200 << 20))  # held, as a pickler's memo would be until it is done
    return {"pid": os.getpid(), "held": len(_HELD[-1])}


def test_what_the_inspection_allocates_stays_in_the_copy() -> None:
    before = _rss_kib()
    found, why = run_in_child(_allocate_200_mib, 30.0)
    assert why is None and found is not None
    assert found["held"] == 200 << 20 and found["pid"] != os.getpid()
    assert _HELD == [] and _rss_kib() - before < 50 * 1024


def _forever() -> dict[str, int]:
    time.sleep(3600)
    return {}


def test_a_copy_past_its_deadline_is_stopped_and_reaped() -> None:
    found, why = run_in_child(_forever, 0.5)
    assert found is None and why is not None and "stopped" in why
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)  # nothing of ours left to reap
    except ChildProcessError:
        pid = 0
    assert pid == 0


def _fails() -> dict[str, int]:
    raise ValueError("an exotic dataset")


def test_an_inspection_that_raises_is_missing_with_a_reason() -> None:
    found, why = run_in_child(_fails, 30.0)
    assert found is None and why is not None and "ValueError: an exotic dataset" in why
