"""A process and its descendants, and killing them all at once: used by the hang stop, check limits and tune."""

from __future__ import annotations

import psutil


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants, each remembering its start time so a reused pid is never hit."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def kill_tree(pid: int) -> None:
    """SIGKILL the process and its descendants at once (workers would notice their parent's death only seconds
    later, and a hung one never)."""
    for proc in tree(pid):
        try:
            proc.kill()
        except psutil.Error:
            pass  # it exited between listing and signalling: nothing left to stop
