"""The hang watch gives workers that are still starting (no in-flight record yet) time past --hang-timeout."""

from __future__ import annotations

import subprocess
import sys

from dlprobe.in_training.inflight_slot import Slot
from dlprobe.rundir import inflight_format as fmt
from dlprobe.rundir.inflight_format import WAITING
from dlprobe.supervisor.hang.watch import STARTUP_GRACE_S, HangWatch

MAIN = 4242


def _waiting_main(run_dir):
    main = Slot(fmt.slot_path(run_dir, MAIN), fmt.ROLE_MAIN, -1, -1)
    main.loop(WAITING, 0, 0, 0, 0)
    return fmt.read_slot(fmt.slot_path(run_dir, MAIN))["loop"]["since"]


def test_a_wait_while_every_worker_is_still_starting_is_not_a_hang_until_the_grace_runs_out(tmp_path):
    since = _waiting_main(tmp_path)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # alive, no in-flight record
    try:
        workers = {worker.pid: (MAIN, 0, 0)}
        watch = HangWatch(tmp_path, MAIN, timeout_s=3.0, on_hang="stop")
        assert watch.stalled_wait(since + 5.0, [MAIN], workers) is None  # past the timeout, workers starting
        assert watch.stalled_wait(since + STARTUP_GRACE_S + 1, [MAIN], workers) is not None  # the grace is bounded
        assert watch.stalled_wait(since + 5.0, [MAIN]) is not None  # no workers known: the timeout as before
        Slot(fmt.slot_path(tmp_path, worker.pid), fmt.ROLE_WORKER, 0, 0)  # the worker reached worker_init_fn
        # the timeout counts again from the tick that saw it started, not from the wait's start (a forkserver worker
        # that started 7.7 s into a wait was a main-hang at once, before its first batch could come)
        assert watch.stalled_wait(since + 6.0, [MAIN], workers) is None
        assert watch.stalled_wait(since + 8.0, [MAIN], workers) is None
        assert watch.stalled_wait(since + 9.5, [MAIN], workers) is not None
        # a wait never seen with its workers starting: a hang at the timeout, as before
        assert HangWatch(tmp_path, MAIN, timeout_s=3.0, on_hang="stop").stalled_wait(since + 5.0, [MAIN], workers)
    finally:
        worker.kill()
        worker.wait()


def test_workers_that_are_gone_do_not_hold_the_hang_back(tmp_path):
    since = _waiting_main(tmp_path)
    worker = subprocess.Popen([sys.executable, "-c", "pass"])
    worker.wait()
    watch = HangWatch(tmp_path, MAIN, timeout_s=3.0, on_hang="stop")
    assert watch.stalled_wait(since + 5.0, [MAIN], {worker.pid: (MAIN, 0, 0)}) is not None
