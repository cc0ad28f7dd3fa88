"""The one process-tree killer (hang stop, check limits, tune budget) on a real parent with a real child."""

import subprocess
import sys

import psutil

from dlprobe.check import limits
from dlprobe.supervisor import tune_sweep
from dlprobe.supervisor.hang import stop
from dlprobe.system import proctree

PARENT = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_kill_tree_kills_the_process_and_its_descendants():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    children: list[psutil.Process] = []
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        children = psutil.Process(parent.pid).children(recursive=True)
        [child] = children
        proctree.kill_tree(parent.pid)
        assert parent.wait(timeout=10) == -9
        child.wait(timeout=10)  # reaped by init once its parent is gone
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        for proc in [*children, psutil.Process(parent.pid)] if parent.poll() is None else children:
            if proc.is_running():  # psutil checks the start time: never a reused pid
                proc.kill()
        parent.wait()


def test_check_and_tune_stop_the_tree_through_it():
    assert limits.kill_tree is proctree.kill_tree and tune_sweep.kill_tree is proctree.kill_tree
    assert stop.tree is proctree.tree
