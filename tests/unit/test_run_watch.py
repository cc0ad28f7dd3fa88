"""RunWatch: when a bounded run is stopped (time limit, the hooks' own stop) and how hard."""

from __future__ import annotations

import signal

from dlprobe.check.limits import EXIT_GRACE_S, HOOK_GRACE_S, RunWatch
from dlprobe.rundir.schema import STOP_AFTER_BATCHES_ENV, STOP_AT_ENV


class FakeChild:
    pid = 999_999_999

    def __init__(self) -> None:
        self.signals: list[int] = []

    def poll(self) -> None:
        return None

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


def ev(kind: str, t: float, **fields):
    return {"ev": kind, "t": t, **fields}


def test_the_hooks_stop_gets_a_grace_period_then_signals_in_order():
    watch, child = RunWatch(5, None), FakeChild()
    assert watch.env() == {STOP_AFTER_BATCHES_ENV: "5"}
    watch.on_tick(100.0, [ev("stop", 100.0, reason="max_batches")], child)  # type: ignore[arg-type]
    assert watch.stop is not None and watch.stop.reason == "max_batches" and child.signals == []
    watch.on_tick(100.0 + HOOK_GRACE_S + 0.1, [], child)  # type: ignore[arg-type]
    assert child.signals == [signal.SIGINT]
    watch.escalate_at = 0.0
    watch.on_tick(200.0, [], child)  # type: ignore[arg-type]
    assert child.signals == [signal.SIGINT, signal.SIGTERM]
    assert watch.stop.signals == ("SIGINT", "SIGTERM")


def test_time_limit_is_passed_to_the_hooks_and_enforced_from_outside():
    watch, child = RunWatch(None, 30.0), FakeChild()
    assert watch.deadline is not None and float(watch.env()[STOP_AT_ENV]) == watch.deadline
    watch.on_tick(watch.deadline + 0.1, [], child)  # type: ignore[arg-type]
    assert watch.stop is not None and watch.stop.reason == "max_seconds" and child.signals == []


def test_a_process_the_hooks_are_ending_gets_time_to_exit_before_any_signal():
    # The supervisor's deadline passes, then the hooks stop the loop and the script unwinds (workers shut down,
    # interpreter exit): on a busy machine that took over HOOK_GRACE_S and a SIGINT broke the clean exit.
    watch, child = RunWatch(None, 30.0), FakeChild()
    assert watch.deadline is not None
    watch.on_tick(watch.deadline + 0.1, [], child)  # type: ignore[arg-type]
    stopped_at = watch.deadline + 0.5
    watch.on_tick(stopped_at, [ev("stop", stopped_at, reason="max_seconds", exiting=True)], child)  # type: ignore[arg-type]
    watch.on_tick(stopped_at + HOOK_GRACE_S + 1, [], child)  # type: ignore[arg-type]
    assert child.signals == []
    watch.on_tick(stopped_at + EXIT_GRACE_S + 0.1, [], child)  # type: ignore[arg-type]
    assert child.signals == [signal.SIGINT]  # still bounded: a process that never exits is interrupted


def test_a_stop_the_hooks_could_not_raise_is_interrupted_after_the_short_grace():
    # A loop outside the main thread: the hooks only wrote the event, so the supervisor interrupts the process.
    watch, child = RunWatch(5, None), FakeChild()
    watch.on_tick(100.0, [ev("stop", 100.0, reason="max_batches", exiting=False)], child)  # type: ignore[arg-type]
    watch.on_tick(100.0 + HOOK_GRACE_S + 0.1, [], child)  # type: ignore[arg-type]
    assert child.signals == [signal.SIGINT]
