"""What dlprobe removes from /dev/shm after a job: only torch files of the job's own pids that are gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from dlprobe.system.shm_files import remove_leftovers
from tests.conftest import dead_pid


def test_only_files_of_dead_job_processes_made_during_the_run_are_removed(tmp_path: Path):
    dead, other_dead, living = dead_pid(), dead_pid(), os.getpid()
    started = time.time() - 10
    for name in (f"torch_{dead}_123_0", f"torch_{living}_456_0", f"torch_{other_dead}_789_0", f"mine_{dead}_1"):
        (tmp_path / name).write_bytes(b"x" * 5000)
    old = tmp_path / f"torch_{dead}_1_0"  # same pid, but from before the run: a pid reused from an earlier job
    old.write_bytes(b"x")
    os.utime(old, (started - 60, started - 60))

    removed = remove_leftovers({dead, living}, started, tmp_path)

    assert [name for name, _ in removed] == [f"torch_{dead}_123_0"]
    assert removed[0][1] >= 5000
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"torch_{living}_456_0", f"torch_{other_dead}_789_0", f"mine_{dead}_1", f"torch_{dead}_1_0"]
    )


def test_a_missing_shm_directory_removes_nothing(tmp_path: Path):
    assert remove_leftovers({1}, 0.0, tmp_path / "absent") == []


def test_a_zombie_creator_counts_as_gone(tmp_path: Path):
    # A worker whose parent was killed exits and stays a zombie until it is reaped: its file is garbage already.
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 30
    while time.time() < deadline and psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    (tmp_path / f"torch_{zombie.pid}_1_0").write_bytes(b"x")
    try:
        assert [name for name, _ in remove_leftovers({zombie.pid}, 0.0, tmp_path)] == [f"torch_{zombie.pid}_1_0"]
    finally:
        zombie.wait()
