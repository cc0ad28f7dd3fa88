"""A run directory whose disk fills up stops the recording, never the training: the script's output comes through
whole, dlprobe exits with the script's exit code, and one line says where the recording stopped and why.
The second SIGTERM of a scheduler's grace period, while the report is written, ends the writing with a line; dlprobe
then dies of the SIGTERM that ended the script, as plain python would have."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import can_mount_small_shm

SCRIPTS = Path(__file__).parent.parent / "scripts"


def _why_no_small_disk() -> str | None:
    if shutil.which("unshare") is None:
        return "needs unshare(1) to mount a small disk in a private mount namespace"
    if not can_mount_small_shm():
        return "needs root (or user namespaces) to mount a small tmpfs"
    return None


@pytest.mark.skipif(_why_no_small_disk() is not None, reason=str(_why_no_small_disk()))
def test_a_full_disk_stops_the_recording_not_the_training(tmp_path: Path):
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    command = (
        f"mount -t tmpfs -o size=256k tmpfs {disk} && head -c 240000 /dev/zero > {disk}/filler && "
        f"exec {sys.executable} -m dlprobe run -q --out {run} {SCRIPTS / 'prints_while_loading.py'} 60"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr  # the script's, not dlprobe's
    lines = proc.stdout.splitlines()
    assert lines[-1] == "done" and len(lines) == 61
    assert "Traceback" not in proc.stderr
    stopped = [line for line in proc.stderr.splitlines() if line.startswith("dlprobe: the recording stopped")]
    assert len(stopped) == 1 and "No space left on device" in stopped[0] and str(run) in stopped[0]


def test_a_second_sigterm_while_the_report_is_written_keeps_the_scripts_signal_and_says_so(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(run), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    # The script prints on its own stdout, not through dlprobe: meta.json may come a moment after its first line.
    meta = run / "meta.json"
    deadline = time.monotonic() + 60
    while not meta.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    target = json.loads(meta.read_text())["target_pid"]
    proc.send_signal(signal.SIGTERM)  # forwarded: the script ends with it
    while os.path.exists(f"/proc/{target}") and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)  # the grace period is over: the report is being written now (or is done)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    if not (run / "report.html").exists():
        assert "dlprobe: SIGTERM while writing the report: " in stderr
        assert f"`dlprobe report {run}` makes it" in stderr
