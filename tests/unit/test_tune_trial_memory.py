"""tune's trial memory reader (in_training/trial_memory.py) on a real process: it reads from its own thread until
stopped, and a trial whose epoch ended is measured, never below the peak read."""

from __future__ import annotations

import os
import time

from dlprobe.in_training.trial_memory import READ_EVERY_S, TrialMemory


def test_reads_a_real_process_from_its_thread_until_stopped():
    memory = TrialMemory()
    memory.start([os.getpid()])
    time.sleep(3 * READ_EVERY_S)
    memory.stop()
    read = memory._readings[os.getpid()]
    assert len(read) >= 2 and all(r["uss"] > 0 for _, r in read)
    time.sleep(2 * READ_EVERY_S)
    assert len(memory._readings[os.getpid()]) == len(read)  # stopped: no reading after
    assert memory.limit is not None  # MemTotal at least
    projected = memory.worker_bytes(read[0][0], read[-1][0], 1.0, read[0][0])  # the epoch ended: measured
    assert projected is not None and projected >= max(r["uss"] for _, r in read)  # never below its peak
