"""The take-over: commands that need the script's DataLoader but not its training (scan, tune) set TAKEOVER_ENV, and
when loader N (TAKEOVER_LOADER_ENV) is first iterated, the named function "package.module:function" gets the
DataLoader, and its int result ends the script. With TAKEOVER_STEPS_ENV (tune), the script's loop first runs that
many steps over it, timed (loop_clock.py), and the loader is taken over as the loop asks for the next batch.

hooks.py's probed __iter__/__next__ call in here, and read `deferred` and `ended_with` as they run."""

from __future__ import annotations

import atexit
import importlib
import os
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.event_log import emit
from dlprobe.in_training.loader_registry import flush_all, inside
from dlprobe.in_training.loop_clock import LoopClock
from dlprobe.rundir.schema import EV_TAKEOVER, EV_TUNE_LOOP, TAKEOVER_ENV, TAKEOVER_LOADER_ENV, TAKEOVER_STEPS_ENV

deferred: LoopClock | None = None  # the loop being timed before its loader is taken over
_loop_timed: dict[str, Any] | None = None  # what it timed (loop_clock.LoopClock.summary), once taken over
ended_with: int | None = None  # the exit status a take-over ended the script with (raised again if it was caught)
taking_over = False  # a take-over function (tune's trials, scan) runs: its loaders are its own, not the script's


def maybe_take_over(loader: Any, loader_id: int) -> None:
    """Hand the loader to a dlprobe command instead of letting the script train (returns only if it says None), or
    first let the loop run the steps TAKEOVER_STEPS_ENV asks for, timed (the take-over then comes in next())."""
    global deferred
    target = os.environ.get(TAKEOVER_ENV)
    if not target or loader_id != int(os.environ.get(TAKEOVER_LOADER_ENV, "0")):
        return
    steps = os.environ.get(TAKEOVER_STEPS_ENV, "")
    if steps.isdigit() and int(steps) > 0:
        deferred = LoopClock(loader, loader_id, int(steps))
        atexit.register(_loop_at_exit)  # a loop that stops early and never iterates again
        return
    _take_over(loader, loader_id)


def loop_timed() -> dict[str, Any] | None:
    """What the script's loop timed before the take-over (None: it was not asked to run first)."""
    return _loop_timed


def script_ended(normally: bool) -> None:
    """How the script ended: after an exception (Ctrl-C included), a loop still being timed is forgotten, so nothing
    is taken over or recorded at exit: the error is the news. (A non-zero sys.exit reaches no hook of python's before
    the atexit handlers: tune reads the exit status itself and ignores a loop recorded by a failed script.)"""
    global deferred
    if not normally:
        deferred = None


def ended_by_exception() -> None:
    """Before an uncaught exception that ends the process is recorded: its loop's timing is void, its batches sent."""
    script_ended(normally=False)
    flush_all()


def take_over_deferred(iterator: Any) -> None:
    """The loop's steps are timed: stop its iterator's workers (the trials' own start on a machine without them) and
    take the loader over."""
    global deferred, _loop_timed
    clock, deferred = deferred, None
    if clock is None:
        return
    _loop_timed = clock.summary()
    _stop_workers(iterator)
    _take_over(clock.loader, clock.loader_id)


def _stop_workers(iterator: Any) -> None:
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        try:
            iterator._shutdown_workers()
        except Exception as exc:
            probe_errors.record("hooks.takeover", exc, "the script's own workers may still run beside the trials")


def _loop_at_exit() -> None:
    """The script ended normally with its loop still timed: it stopped asking for batches before the steps were
    timed (a loop that breaks early). No trials here: the interpreter is shutting down (thread pools refuse work,
    Python 3.12.0-3.12.2 refuses to fork) and the script's own clean-up has run. What the loop timed is recorded
    instead, and tune runs the script again, taking the loader over at its first iteration."""
    global deferred
    clock, deferred = deferred, None
    if clock is None:
        return
    _stop_workers(clock.iterator)
    emit(EV_TUNE_LOOP, loader=clock.loader_id, **clock.summary())
    flush_all()


def _take_over(loader: Any, loader_id: int) -> None:
    """Run the take-over function (TAKEOVER_ENV's "module:function") on the loader, and end the script with its
    exit status (a None status lets the script go on)."""
    global ended_with
    target = os.environ[TAKEOVER_ENV]
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    emit(EV_TAKEOVER, loader=loader_id, function=target)
    flush_all()
    # The take-over runs inside this loader's probed __iter__, and it builds and iterates loaders of its own (tune's
    # trials): those must be probed like any other, so the re-entry guard is lifted while it runs.
    global taking_over
    outer = getattr(inside, "iter", False), getattr(inside, "next", False)
    inside.iter = inside.next = False
    taking_over = True
    try:
        code = function(loader)
    finally:
        inside.iter, inside.next = outer
        taking_over = False
    if code is None:  # the function let the script go on (scan: past Lightning's sanity check to the next loader)
        return
    ended_with = int(code)
    raise SystemExit(code)


def forget_loop() -> None:
    """No loop is being timed any more (hooks.reset; a forked child: the parent's loop is the parent's)."""
    global deferred
    deferred = None
