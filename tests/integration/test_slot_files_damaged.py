"""dlprobe's in-flight slot files cannot hurt the training: cut to 0 bytes mid-run by someone else, every process
goes on (no SIGBUS from a store into a page past the file's end), stops recording into its slot and says so."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import SCRIPTS

SCRIPT = "slot_files_truncated.py"


def test_slot_files_truncated_mid_run_leave_the_training_as_plain_python_runs_it(probe):
    plain = subprocess.run([sys.executable, str(SCRIPTS / SCRIPT)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    result = probe(SCRIPT, options=["--quiet"])
    assert result.returncode == plain.returncode == 0, result.stderr
    assert result.stdout == plain.stdout
    assert "bus error" not in result.stderr.lower() and "SIGBUS" not in result.stderr, result.stderr
    assert "killed by signal" not in result.stderr, result.stderr
    faults = result.run_dir / "faults"  # a worker's record of the fatal signal that ended it
    assert not faults.exists() or list(faults.iterdir()) == []
    report = result.report
    assert result.findings("worker-killed") == []
    assert not [f for f in report["findings"] if f["code"] in ("bad-sample", "worker-error")]
    stopped = [
        f for f in result.findings("probe-degraded") if str(f["evidence"].get("where", "")).startswith("inflight.slot")
    ]
    # the loop's process and both workers of the first epoch, each named, each because its file was cut
    wheres = sorted(f["evidence"]["where"] for f in stopped)
    assert wheres == ["inflight.slot.loader0.worker0", "inflight.slot.loader0.worker1", "inflight.slot.main"], wheres
    for finding in stopped:
        assert "in-flight recording stopped in" in finding["detail"], finding["detail"]
        assert "truncated" in finding["detail"], finding["detail"]
        assert finding["evidence"]["count"] == 1
