"""Ends the whole training process tree gracefully after a hang: SIGTERM first, SIGKILL what is left."""

from __future__ import annotations

import signal
from collections.abc import Callable

import psutil

from dlprobe.system.proctree import alive, tree

GRACE_S = 3.0


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
        except psutil.Error:  # noqa: S110 - already exited: nothing to stop
            pass
    for child in tree(main_pid)[1:]:
        if child.pid not in {p.pid for p in procs}:
            procs.append(child)
    try:
        psutil.Process(main_pid).send_signal(signal.SIGTERM)
    except psutil.Error:  # noqa: S110 - already exited: nothing to stop
        pass
    if not wait_main(GRACE_S):
        try:
            psutil.Process(main_pid).send_signal(signal.SIGKILL)
        except psutil.Error:  # noqa: S110 - already exited: nothing to stop
            pass
        wait_main(GRACE_S)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        running = [p for p in procs if alive(p)]
        for proc in running:
            try:
                proc.send_signal(sig)
            except psutil.Error:  # noqa: S110 - already exited: nothing to stop
                pass
        if running:
            psutil.wait_procs(running, timeout=GRACE_S)
    return [p.pid for p in procs if alive(p)]
