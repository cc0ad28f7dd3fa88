"""Shared-memory files torch left in /dev/shm for processes of the job that are gone, found and removed at the end.

torch names a tensor's shared-memory file `torch_<creator pid>_<random>_<n>` and unlinks it once the receiver has
it; a process killed in between (a rank torchrun stops because another rank failed, a worker SIGKILLed) leaves the
file behind, holding memory until reboot. Only files of the job's own pids, created since the run started, whose
creator no longer exists, are touched: no living process can still need them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import psutil

from dlprobe.system.proctree import alive

SHM_DIR = Path("/dev/shm")
_TORCH_FILE = re.compile(r"^torch_(\d+)_")


def _running(pid: int) -> bool:
    """Alive and not a zombie: a worker whose dead parent has not been reaped yet has released its mappings."""
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def remove_leftovers(pids: set[int], since: float, shm_dir: Path = SHM_DIR) -> list[tuple[str, int]]:
    """Remove the files dead job processes left; (name, bytes) of each one removed."""
    removed: list[tuple[str, int]] = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    for name in names:
        match = _TORCH_FILE.match(name)
        if match is None or int(match[1]) not in pids or _running(int(match[1])):
            continue
        path = shm_dir / name
        try:
            info = path.stat()
            if info.st_mtime < since:
                continue  # older than the run: a pid reused from an earlier job
            path.unlink()
        except OSError:  # noqa: S112 - removed meanwhile, or not ours to remove
            continue
        removed.append((name, info.st_blocks * 512))
    return removed
