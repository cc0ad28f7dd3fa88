"""A job killed while dlprobe writes its report (SIGKILL, the allocation ending) keeps a run directory that
`dlprobe report DIR` turns into the whole report later: the run as recorded, the exit code, every output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import run_dlprobe

SCRIPTS = Path(__file__).parent.parent / "scripts"


def test_a_report_killed_midway_is_written_later_by_dlprobe_report(tmp_path: Path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(run), str(SCRIPTS / "healthy_loader.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    # result.json is the supervisor's last record of the run, written as the script has ended and before the report:
    # kill dlprobe there, with no chance to finish anything (SIGKILL cannot be caught).
    deadline = time.monotonic() + 240
    while not (run / "result.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert stdout.startswith("total "), stdout  # the training itself had finished
    for name in ("report.json", "report.html", "trace.json", "memory.png"):
        (run / name).unlink(missing_ok=True)  # whatever the race let it write: `report` must make it all

    later = run_dlprobe(["report", str(run)], cwd=tmp_path)
    assert later.returncode == 0, later.stderr
    assert "Traceback" not in later.stderr + later.stdout
    for name in ("report.json", "report.html", "trace.json", "memory.png"):
        assert (run / name).is_file(), name
    report = json.loads((run / "report.json").read_text())
    assert report["exit_code"] == 0
    (loader,) = report["loaders"]
    assert loader["batches"] == 40  # 640 samples in batches of 32, two epochs: every batch recorded
    assert not report.get("read_problems"), report.get("read_problems")
    assert [f["code"] for f in report["findings"] if f["code"] == "probe-degraded"] == []
