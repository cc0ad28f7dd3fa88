"""Failures of the probe's own bookkeeping that change a diagnosis are recorded and reported, never swallowed: the
supervisor's (result.json "problems") and the training process's (probe_error events)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dlprobe.analysis.findings.probe import find_probe_degraded
from dlprobe.in_training import probe_errors, runtime_state
from dlprobe.supervisor.hang.guard import RunGuard
from dlprobe.supervisor.problems import Problems
from tests.unit import fakes


def test_a_kernel_json_that_cannot_be_written_is_a_problem_not_silence(tmp_path: Path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    problems = Problems()
    guard = RunGuard(tmp_path, child, 0, "wait", lambda text: None, problems=problems)
    guard.run_dir = tmp_path / "gone"  # kernel.json's folder no longer exists when the run ends
    guard.finish({child.pid})
    [problem] = problems.as_list()
    assert (problem["where"], problem["type"], problem["count"]) == ("kernel.json write", "FileNotFoundError", 1)
    assert "outside signal" in problem["consequence"]


def test_supervisor_problems_in_result_json_are_probe_degraded_findings():
    run = fakes.run([], [])
    run.result["problems"] = [
        {"where": "stderr.log write", "type": "OSError", "message": "[Errno 28] No space left on device",
         "consequence": "stderr.log misses part of the script's output", "count": 3}
    ]  # fmt: skip
    [finding] = find_probe_degraded(run)
    assert finding.title == "The probe could not record everything: stderr.log write failed with OSError"
    assert "failed (3 times): OSError: [Errno 28] No space left on device; so stderr.log misses" in finding.detail


def test_a_fork_snapshot_that_fails_is_recorded(monkeypatch):
    class BrokenTorch:
        def get_num_threads(self):
            raise RuntimeError("torch half torn down")

    recorded = []
    monkeypatch.setitem(sys.modules, "torch", BrokenTorch())
    monkeypatch.setattr(probe_errors, "record", lambda where, exc, consequence: recorded.append((where, str(exc))))
    state = runtime_state.fork_snapshot()
    assert "torch_threads" not in state
    assert recorded == [("runtime_state.fork_snapshot", "torch half torn down")]
