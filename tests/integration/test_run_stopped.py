"""A training process stopped (SIGSTOP, Ctrl-Z, a debugger) while its loop waits for a batch is named as stopped at
the hang: py-spy cannot read a stopped process and fails with words that name ptrace, which is no permission
problem, so no ptrace advice is given."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlprobe.rundir.inflight_format import read_slot, slot_path
from tests.conftest import SCRIPTS, assert_no_probe_frames

ENV = {**os.environ, "COLUMNS": "120"}


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


def _stop_while_waiting(run_dir: Path, pid: int) -> None:
    """SIGSTOP the loop while its in-flight slot says it waits for a batch (the hang watch times only such a wait);
    one stop that lands between two batches is let go and tried again. Let go for a moment: stopped again at once, a
    process on a busy machine may not have run in between, and 200 tries read the one state it was first stopped in."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        os.kill(pid, signal.SIGSTOP)
        while _state(pid) != "T":  # the stop lands asynchronously
            pass
        loop = (read_slot(slot_path(run_dir, pid)) or {}).get("loop") or {}
        if loop.get("state") == "waiting-for-batch":
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(random.uniform(0.005, 0.05))  # off the batches' rhythm
    raise AssertionError("the loop was never seen waiting for a batch")


def test_a_training_stopped_by_sigstop_is_a_hang_of_a_stopped_process_not_a_ptrace_refusal(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "dlprobe", "run", "--quiet", "--hang-timeout", "3", "--on-hang", "stop",
               "--out", str(run_dir), str(SCRIPTS / "slow_samples_loop.py")]  # fmt: skip
    proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = None
    try:
        first = proc.stdout.readline()
        assert first.startswith("pid "), first
        pid = int(first.split()[1])
        batch = proc.stdout.readline()  # the loop runs: the stop lands while it waits for the next batch
        assert batch.startswith("batch 0 "), batch
        _stop_while_waiting(run_dir, pid)
        # --on-hang stop: the hang is recorded 3 s into the wait, then the tree is stopped (SIGKILL ends a stopped
        # process; its SIGTERM waits until it continues)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The workers of a killed training may print their own teardown traceback (torch's resource sharer losing its
    # peer), as they do unprobed; none of it is dlprobe's
    assert_no_probe_frames(stderr)
    report = json.loads((run_dir / "report.json").read_text())
    [hang] = [f for f in report["findings"] if f["code"] == "main-hang"]
    assert hang["evidence"]["cause"] == "stopped" and hang["evidence"]["pid"] == pid
    said = f"process {pid} is stopped (state T: SIGSTOP, Ctrl-Z or a debugger); its stacks cannot be read until it"
    assert said in hang["detail"] and f"kill -CONT {pid}" in hang["fix"]
    record = json.loads((run_dir / "hangs" / "hang-1.json").read_text())
    assert record["stack_problem"]["kind"] == "stopped"
    [main] = [p for p in record["processes"] if p["pid"] == pid]
    assert main["state"] == "T" and main["stack_error"].startswith(f"process {pid} is stopped")
    everything = json.dumps(report["findings"]).lower()
    assert "ptrace" not in everything and "permission" not in everything
