"""in_training/quiet_fork.py and the readiness copy's guards: no copy where a memory limit is too close (a real
memory cgroup), a copy blocked on a lock held at the fork stopped for want of progress (not at the time limit), the
script's at-fork registrations noticed, and a SIGCHLD of dlprobe's own child kept from the script's handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dlprobe.in_training import isolated, quiet_fork
from tests.conftest import memory_cgroup

ROOT = Path(__file__).resolve().parents[2]
ASK_HEADROOM = (
    "from dlprobe.in_training import quiet_fork\nprint(quiet_fork.headroom_blocker(quiet_fork.anon_resident_bytes()))\n"
)


def test_no_copy_where_the_memory_limit_leaves_less_than_the_copy_could_take():
    # A real cgroup whose limit leaves this python ~40 MiB beyond what it uses: the copy could take its whole
    # anonymous memory (a fork duplicates every page pickling touches), so it must not be forked
    with memory_cgroup(96 * 1024 * 1024) as group:
        command = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -c '{ASK_HEADROOM}'"
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "the job's memory limit leaves" in proc.stdout and "(limit 96 MiB)" in proc.stdout, proc.stdout


def test_a_copy_is_allowed_where_memory_is_plenty():
    assert quiet_fork.headroom_blocker(16 * 1024 * 1024) is None  # this machine: GiBs available, no tight limit


def test_a_copy_blocked_on_a_lock_held_at_the_fork_is_stopped_for_want_of_progress():
    lock = threading.Lock()
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            done.wait(60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    holding.wait()

    def needs_the_lock() -> dict[str, object]:
        with lock:  # held forever in the copy: the thread that holds it was not copied
            return {}

    try:
        found, why = isolated.run_in_child(needs_the_lock, 60.0)
    finally:
        done.set()
        holder.join()  # no thread of this test's left for the next test in this process to see
    assert found is None and why is not None and "used no CPU" in why, why  # not "took over 60 s"


def test_the_scripts_at_fork_registration_is_noticed_and_torchs_is_not(monkeypatch):
    monkeypatch.setattr(quiet_fork, "_foreign_at_fork", [])
    quiet_fork.track_at_fork()
    assert quiet_fork.blocker() is None
    code = compile("os.register_at_fork(after_in_child=lambda: None)", "/srv/project/train.py", "exec")
    exec(code, {"os": os, "__name__": "__main__"})  # noqa: S102 - a registration made from the script's file
    exec(code, {"os": os, "__name__": "torch.multiprocessing._atfork"})  # noqa: S102 - torch's own helper
    reason = quiet_fork.blocker()
    assert reason is not None and "at-fork handlers (train.py:1)" in reason, reason


def test_the_sigchld_of_dlprobes_own_child_does_not_reach_the_handler():
    seen: list[int] = []
    previous = signal.signal(signal.SIGCHLD, lambda signum, _frame: seen.append(signum))
    try:
        found, why = isolated.run_in_child(lambda: {"ok": True}, 30.0)
        assert found == {"ok": True}, why
        assert seen == []
        child = subprocess.Popen([sys.executable, "-c", "pass"])  # a child of the script's own: its signal arrives
        child.wait()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [signal.SIGCHLD]
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_a_librarys_child_only_handler_is_no_blocker_and_its_parent_side_handler_is(monkeypatch):
    monkeypatch.setattr(quiet_fork, "_foreign_at_fork", [])
    quiet_fork.track_at_fork()
    lib = "/opt/venv/lib/python3.11/site-packages/huggingface_hub/utils/_http.py"
    child_only = compile("os.register_at_fork(after_in_child=lambda: None)", lib, "exec")
    exec(child_only, {"os": os, "__name__": "huggingface_hub.utils._http"})  # noqa: S102 - resets a session in the child
    assert quiet_fork.blocker() is None
    in_parent = compile("os.register_at_fork(before=lambda: None)", lib, "exec")
    exec(in_parent, {"os": os, "__name__": "huggingface_hub.utils._http"})  # noqa: S102 - would run in the training
    reason = quiet_fork.blocker()
    assert reason is not None and "at-fork handlers (_http.py:1)" in reason, reason


@pytest.mark.parametrize("value", ["1"])
def test_the_option_turns_the_copies_off(monkeypatch, value):
    monkeypatch.setenv("DLPROBE_NO_ISOLATED_CHECKS", value)
    reason = quiet_fork.blocker()
    assert reason is not None and "--no-isolated-checks" in reason
