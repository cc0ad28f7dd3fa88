"""The sampler's cheap reading: a process that exited and waits to be reaped has no memory to read."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from dlprobe.system.procmem import read_stat


def test_a_living_process_has_rss_and_a_zombie_reads_as_gone():
    rss, faults = read_stat(os.getpid()) or (0, 0)
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
