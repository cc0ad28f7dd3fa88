"""A process and its descendants, and killing them all at once: used by the hang stop, check limits and tune."""

from __future__ import annotations

import os

import psutil


def alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
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
        except psutil.Error:  # noqa: S110 - it exited between listing and signalling: nothing left to stop
            pass


def descendant_pids(pid: int) -> list[int] | None:
    """Pids below `pid`, from /proc/PID/task/TID/children: the cost grows with the tree, not with every process on
    the host as psutil's children() scan does. None where the kernel lacks the file (CONFIG_PROC_CHILDREN)."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return None
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:  # noqa: S112 - it exited while we walked: its children are re-parented and found later
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):  # noqa: S112 - the thread exited between listdir and open
                continue
            found.extend(children)
            stack.extend(children)
    return found
