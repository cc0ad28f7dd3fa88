"""tune's trial memory reader (in_training/trial_memory.py) on a real process: it reads from its own thread until
stopped, and a trial whose epoch ended is measured, never below the peak read."""

from __future__ import annotations

import os
import time

from dlprobe.in_training import probe_errors
from dlprobe.in_training.trial_memory import MAX_CPU_SHARE, READ_EVERY_S, TrialMemory, wait_after


def _readings_of(memory: TrialMemory, pid: int, at_least: int) -> None:
    deadline = time.monotonic() + 30  # a busy machine delays the thread, never the test's outcome
    while len(memory._readings.get(pid, [])) < at_least and time.monotonic() < deadline:
        time.sleep(READ_EVERY_S)


def test_reads_a_real_process_from_its_thread_until_stopped():
    memory = TrialMemory()
    memory.start([os.getpid()])
    _readings_of(memory, os.getpid(), 2)
    memory.stop()
    read = memory._readings[os.getpid()]
    assert len(read) >= 2 and all(r["uss"] > 0 for _, r in read)
    time.sleep(2 * READ_EVERY_S)
    assert len(memory._readings[os.getpid()]) == len(read)  # stopped: no reading after
    assert memory.limit is not None  # MemTotal at least
    projected = memory.worker_bytes(read[0][0], read[-1][0], 1.0, read[0][0])  # the epoch ended: measured
    assert projected is not None and projected >= max(r["uss"] for _, r in read)  # never below its peak


def test_the_reads_own_cpu_is_said_and_a_costly_round_waits_longer():
    memory = TrialMemory()
    memory.start([os.getpid()])
    _readings_of(memory, os.getpid(), 2)
    memory.stop()
    assert memory.cpu_s > 0  # what tune_trials takes out of the main process's CPU share
    assert wait_after(0.001) == READ_EVERY_S
    # 34 ms a round (8 workers of 1 GiB cost about that each): never more than MAX_CPU_SHARE of a core
    assert wait_after(8 * 0.034) == 8 * 0.034 / MAX_CPU_SHARE


def test_a_process_it_cannot_read_is_recorded_once_as_the_probes_failure(monkeypatch):
    from dlprobe.system import procmem

    monkeypatch.setattr(procmem, "read_smaps_rollup_or_why", lambda pid: (None, "PermissionError: not dumpable"))
    before = probe_errors._counts.get("trial_memory.read", 0)
    memory = TrialMemory()
    memory.start([os.getpid() + 10**6])
    deadline = time.monotonic() + 30
    while len(memory._unread) < 2 and time.monotonic() < deadline:
        time.sleep(READ_EVERY_S)
    memory.stop()
    assert probe_errors._counts.get("trial_memory.read", 0) == before + 2  # the parent and the worker, once each
    assert memory.worker_bytes(0.0, 1.0, 1.0, 0.0) is None  # nothing read: no figure
