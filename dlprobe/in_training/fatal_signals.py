"""A DataLoader worker's own record of the fatal signal that ends it (faults/PID.txt), written by faulthandler."""

from __future__ import annotations

import faulthandler
import os
from pathlib import Path
from typing import IO

from dlprobe import atomic
from dlprobe.rundir.handle import RunDir

# Kept open for faulthandler's C handler, which writes to its fd as the worker dies; None where none is installed.
_record: IO[str] | None = None
_path: Path | None = None


def record_in_worker(run_dir: str) -> bool:
    """Have faulthandler write this worker's fatal signal and Python stack to faults/PID.txt; False when the
    worker already has a faulthandler of the user's (PYTHONFAULTHANDLER, faulthandler.enable()), left as it is.

    Why: torch names a crashed worker's signal only when its SIGCHLD handler wins the race with other errors (torch
    2.15 re-raised a ConnectionResetError first in some runs), and never under forkserver, where the worker is not
    the training process's child ("exited unexpectedly"). The worker's own record says how it died either way.
    faulthandler chains to the handler it replaces (torch's, which prints its one line and re-raises), so the worker
    still dies of the same signal and the training process sees the same exit status."""
    global _record, _path
    if faulthandler.is_enabled():
        return False
    files = RunDir(run_dir)
    files.faults_dir.mkdir(parents=True, exist_ok=True)
    path = files.fault_record(os.getpid())
    _record = atomic.create_file(path)  # kept open for the handler
    _path = path
    faulthandler.enable(file=_record, all_threads=False)
    os.register_at_fork(after_in_child=_off_in_child)
    _remove_at_clean_exit()
    return True


def _off_in_child() -> None:
    # A process the worker forks (a decoder pool, a subprocess helper) must not write this worker's record.
    global _record, _path
    if _record is not None:
        faulthandler.disable()
    _record = _path = None


def _remove_at_clean_exit() -> None:
    """A worker that ends normally leaves no empty record: multiprocessing runs its finalizers at a clean exit,
    never after a fatal signal."""
    from multiprocessing import util

    util.Finalize(None, _remove_if_empty, exitpriority=0)


def _remove_if_empty() -> None:
    global _record, _path
    if _record is None or _path is None:
        return
    faulthandler.disable()
    _record.close()
    try:
        if _path.stat().st_size == 0:
            _path.unlink()
    except OSError:  # noqa: S110 - an empty record left behind reads as no crash: nothing is lost
        pass
    _record = _path = None
