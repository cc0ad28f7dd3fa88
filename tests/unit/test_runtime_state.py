"""Which of the parent's threads the fork snapshot reports: a progress bar's refresh thread is not a hazard."""

from __future__ import annotations

import io
import threading

import pytest
from rich.console import Console
from rich.live import Live

from dlprobe.in_training.runtime_state import fork_snapshot


def _names() -> set[str]:
    return {t["name"] for t in fork_snapshot()["python_threads"]}


def test_rich_refresh_thread_is_left_out_but_a_user_thread_is_kept():
    stop = threading.Event()
    user = threading.Thread(target=stop.wait, name="user-worker", daemon=True)
    user.start()
    live = Live("x", console=Console(file=io.StringIO(), force_terminal=True), refresh_per_second=50)
    try:
        with live:
            refresher = live._refresh_thread
            assert refresher is not None and refresher.is_alive()
            names = _names()
        assert refresher.name not in names
        assert "user-worker" in names
    finally:
        stop.set()
        user.join()


def test_lightnings_own_subclass_of_richs_refresh_thread_is_left_out_too():
    # Lightning's RichProgressBar subclasses rich.live._RefreshThread and refreshes under the bar's own lock, so a
    # fork that catches it mid-refresh read as "a thread taking a lock" (a warning) on a loaded machine.
    rich_progress = pytest.importorskip("lightning.pytorch.callbacks.progress.rich_progress")
    _RefreshThread = rich_progress._RefreshThread

    live = Live("x", console=Console(file=io.StringIO(), force_terminal=True), refresh_per_second=50)
    refresher = _RefreshThread(live, refresh_per_second=50)
    refresher.start()
    try:
        assert refresher.name not in _names()
    finally:
        refresher.stop()
        refresher.join()


def test_a_left_out_thread_still_alive_at_fork_is_no_native_thread_either():
    # A queue feeder of the previous epoch still shutting down (slower on a busy machine) is left out of the Python
    # threads; its OS thread must not then read as "1 native thread(s) started since import" (a fork-hazard).
    from dlprobe.analysis.findings.startup import _fork_finding
    from dlprobe.analysis.run.model import LoaderRecord

    def with_feeder() -> tuple[dict, dict]:
        baseline = {"os_threads": fork_snapshot()["os_threads"], "python_threads": 0}
        stop = threading.Event()
        feeder = threading.Thread(target=stop.wait, name="QueueFeederThread", daemon=True)
        feeder.start()
        try:
            return baseline, {**fork_snapshot(), "baseline": baseline, "epoch": 1}
        finally:
            stop.set()
            feeder.join()

    # the pytest process's other threads (a previous test's still ending, under xdist) move the OS count too: taken
    # again until nothing else started or ended around it, inside it as well (a feeder counted reads one more on every
    # try, so the loop cannot make the count right)
    for _ in range(20):
        baseline, state = with_feeder()
        if fork_snapshot()["os_threads"] == baseline["os_threads"] == state["os_threads"]:
            break
    assert state["python_threads"] == [] and state["os_threads"] == baseline["os_threads"]
    assert _fork_finding(LoaderRecord(0, {"num_workers": 2}, 0.0, "fork"), state) is None


class _Marker:
    """Something only the caller's frame holds, weakly watched."""


def test_the_snapshot_keeps_no_frame_of_its_caller_alive():
    # sys._current_frames() includes the snapshot's own frame: kept in a local, the cycle held every caller's frame
    # (the DataLoader iterator being made among its locals) until a garbage collection.
    import gc
    import weakref

    def caller() -> weakref.ref[_Marker]:
        marker = _Marker()
        fork_snapshot()
        return weakref.ref(marker)

    enabled = gc.isenabled()
    gc.disable()
    try:
        assert caller()() is None
    finally:
        if enabled:
            gc.enable()
