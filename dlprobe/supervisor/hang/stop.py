"""Ends the whole training process tree: the one place that signals it (hang stop, check limits, tune budget)."""

from __future__ import annotations

import signal
from collections.abc import Callable

import psutil

GRACE_S = 3.0


def _alive(proc: psutil.Process) -> bool:
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


def stop_tree(main_pid: int, pids: list[int], wait_main: Callable[[float], bool]) -> list[int]:
    """SIGTERM the main process, then its workers, SIGKILL whatever is still there; returns pids that survived.

    A hung worker never notices that its parent died (it is blocked in the sample, not polling), so it
    has to be stopped explicitly. wait_main waits for the main process through its Popen, which keeps
    its exit status.
    """
    procs: list[psutil.Process] = []
    for pid in pids:
        if pid == main_pid:
            continue
        try:
            procs.append(psutil.Process(pid))  # remembers the start time, so a reused pid is never hit
        except psutil.Error:
            pass
    for child in tree(main_pid)[1:]:
        if child.pid not in {p.pid for p in procs}:
            procs.append(child)
    try:
        psutil.Process(main_pid).send_signal(signal.SIGTERM)
    except psutil.Error:
        pass
    if not wait_main(GRACE_S):
        try:
            psutil.Process(main_pid).send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
        wait_main(GRACE_S)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if _alive(p)]
        for proc in alive:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        if alive:
            psutil.wait_procs(alive, timeout=GRACE_S)
    return [p.pid for p in procs if _alive(p)]
