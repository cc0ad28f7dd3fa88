"""The sampler's cheap reading: a process that exited and waits to be reaped has no memory to read; CPU time grows
with work done, not with time asleep."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from dlprobe.system.procmem import read_run_delay, read_stat


def test_a_living_process_has_rss_and_a_zombie_reads_as_gone():
    rss, faults, _cpu = read_stat(os.getpid()) or (0, 0, 0.0)
    assert rss > 0 and faults > 0
    # A worker that segfaulted stays a zombie until torch reaps it; its RSS reads 0, which must not become its
    # "last RSS before it died".
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 30
    while time.time() < deadline and psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    try:
        assert read_stat(child.pid) is None
    finally:
        child.wait()


def test_cpu_time_grows_by_the_work_done_and_not_by_sleeping():
    before = read_stat(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    spun = read_stat(os.getpid())
    time.sleep(0.3)
    slept = read_stat(os.getpid())
    assert before and spun and slept
    assert 0.25 <= spun[2] - before[2] <= 0.5  # clock ticks are 10 ms; the loop itself costs a little more
    assert slept[2] - spun[2] < 0.05
    delay = read_run_delay(os.getpid())
    assert delay is None or delay >= 0.0  # None: a kernel without schedstats


def test_kept_descriptors_read_what_a_fresh_open_reads_and_go_with_their_process():
    from dlprobe.system.proc_files import ProcFiles

    files = ProcFiles()
    # The child says it is ready and then blocks: a process still starting moves its RSS and faults between reads.
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        first = files.stat(child.pid)
        assert first is not None and files.run_delay(child.pid) is not None
        kept = dict(files.fds)
        assert set(kept) == {(child.pid, "stat"), (child.pid, "schedstat")}
        again = files.stat(child.pid)
        fresh = read_stat(child.pid)
        assert again is not None and fresh is not None and again[:2] == fresh[:2]
        assert files.fds == kept  # the second read went through the same descriptors
    finally:
        child.communicate(b"")
    # reaped: the descriptor opened for it reads nothing (never a later process that took its pid)
    assert files.stat(child.pid) is None and files.run_delay(child.pid) is None
    files.forget(child.pid)
    for fd in kept.values():
        with pytest.raises(OSError):
            os.fstat(fd)


def test_descriptors_are_not_kept_when_told_not_to_and_closed_at_the_end():
    from dlprobe.system.proc_files import ProcFiles

    transient = ProcFiles(keep_open=False)
    assert transient.stat(os.getpid()) is not None and transient.fds == {}
    kept = ProcFiles()
    assert kept.stat(os.getpid()) is not None and len(kept.fds) == 1
    kept.close()
    assert kept.fds == {}


def test_a_process_cpu_counts_every_thread_where_its_main_threads_schedstat_misses_a_busy_one():
    from dlprobe.system.procmem import read_process_schedstat, read_task_schedstat

    # A DataLoader worker's queue feeder thread pickles each batch into shared memory while the main thread sleeps
    # in the queue's get: the worker's CPU is the sum over its threads.
    code = (
        "import sys, threading, time\n"
        "spun, forever = threading.Event(), threading.Event()\n"
        "def spin():\n"
        "    end = time.thread_time() + 0.3\n"
        "    while time.thread_time() < end: pass\n"
        "    spun.set(); forever.wait()\n"
        "threading.Thread(target=spin, daemon=True).start(); spun.wait()\n"
        "print('done', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"done\n"
        leader, whole = read_task_schedstat(f"/proc/{child.pid}/schedstat"), read_process_schedstat(child.pid)
        if leader is None:
            pytest.skip("this kernel keeps no schedstats")
        assert whole is not None
        # The other thread spent 0.3 s of CPU (its own clock, however busy the machine): the sum has it, the main
        # thread's own reading does not.
        assert whole[0] - leader[0] >= 0.29
    finally:
        child.kill()
        child.wait()


def test_a_process_in_its_exit_reads_as_gone():
    from dlprobe.system.procmem import PF_EXITING, parse_stat

    # An OOM-killed training process unmaps its pages while it exits; its workers then hold them alone. Its stat
    # still reads "R" or "D" then, with PF_EXITING in the flags (field 9): it must count as gone from that moment.
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        data = f.read()
    head, _, tail = data.rpartition(b") ")
    fields = tail.split(b" ")
    assert parse_stat(data) is not None and not int(fields[6]) & PF_EXITING
    fields[6] = str(int(fields[6]) | PF_EXITING).encode()
    assert parse_stat(head + b") " + b" ".join(fields)) is None
