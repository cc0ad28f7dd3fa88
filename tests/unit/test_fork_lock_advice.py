"""A dataset whose thread sleeps holding a lock its `__getitem__` needs, forked: the thread reads as idle at the fork,
a worker hangs on the lock. Taken from a real run (a `_flush` thread, `self.lock` a threading.Lock): the advice must
not call the idle thread harmless, nor send the user to forkserver/spawn, which the run's own check showed fail on
the unpicklable lock (forkserver: "cannot pickle '_thread.lock' object")."""

from __future__ import annotations

from dlprobe.analysis.findings.hangs import find_hangs
from dlprobe.analysis.findings.startup import find_fork_hazard
from dlprobe.rundir.schema import EV_FORK_STATE, EV_START_READINESS
from tests.unit.fakes import loader, run
from tests.unit.test_stack_causes import native, py, worker

FORK_STATE = {"ev": EV_FORK_STATE, "t": 100.0, "pid": 1, "loader": 0, "epoch": 0, "os_threads": 2,
              "python_threads": [{"name": "Thread-1 (_flush)", "state": "waiting"}], "torch_threads": 1}  # fmt: skip
NOT_PICKLABLE = {"ev": EV_START_READINESS, "t": 100.0, "pid": 1, "loader": 0, "start_method": "fork",
                 "objects": [{"name": "dataset", "picklable": False, "attribute": "self.lock",
                              "reason": "a lock (_thread.lock)"}]}  # fmt: skip


def _hung_on_the_lock(events: list[dict]):
    proc = worker(
        [native("do_futex_wait"), native("PyThread_acquire_lock_timed"), py("__getitem__", "with self.lock:")]
    )
    proc |= {"role": "worker", "loader_id": 0, "worker_id": 0, "pid": 11,
             "inflight": {"index": 0, "phase": "getitem", "kind": "map"}}  # fmt: skip
    probed = run([loader()], [], events=events)
    loop = {"loader_id": 0, "awaited_task": 0, "awaited_worker": 0}
    probed.hangs = [{"number": 1, "t": 130.0, "waited_s": 20.0, "loop": loop, "processes": [proc]}]
    return probed


def test_a_thread_idle_at_fork_that_holds_the_lock_a_worker_hangs_on_is_a_cause_and_spawn_is_qualified():
    probed = _hung_on_the_lock([FORK_STATE, NOT_PICKLABLE])
    [hazard] = find_fork_hazard(probed)
    assert "nothing for threads idle" not in hazard.fix and "may still hold a lock" in hazard.fix
    assert "persistent_workers=True" in hazard.fix and hazard.severity == "warning"
    assert "once the dataset pickles" in hazard.fix and "`self.lock` of the dataset is a lock" in hazard.fix
    [hang] = [f for f in find_hangs(probed) if f.code == "worker-hang"]
    assert hang.evidence["cause"] == "fork-lock"
    assert "or use multiprocessing_context='spawn' or 'forkserver'" not in hang.fix
    assert "once the dataset pickles" in hang.fix


def test_an_idle_thread_with_no_hang_still_needs_no_change_and_a_picklable_dataset_keeps_the_plain_advice():
    probed = run([loader()], [], events=[FORK_STATE])
    [hazard] = find_fork_hazard(probed)
    assert hazard.severity == "info" and hazard.fix.startswith("nothing for threads idle in a wait")
    assert "which start workers without the parent's threads" in hazard.fix
