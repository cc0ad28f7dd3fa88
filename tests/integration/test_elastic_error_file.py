"""torchrun's own failure summary names the DataLoader cause: a real torchrun (gloo on CPU), a real worker that dies,
the rank's TORCHELASTIC_ERROR_FILE written by the dying rank and read by torchelastic's agent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import SCRIPTS, assert_no_probe_frames, memory_cgroup
from tests.integration.test_job_report import MiB, free_port, run_job, torchrun_command


def root_cause(stderr: str) -> str:
    """The "Root Cause (first observed failure)" section of torchrun's ChildFailedError summary."""
    assert "Root Cause (first observed failure):" in stderr, stderr[-3000:]
    section = stderr.split("Root Cause (first observed failure):", 1)[1]
    return section.split("\n=====", 1)[0]


def test_torchruns_summary_names_the_killed_worker_and_its_index(tmp_path: Path) -> None:
    result = run_job(tmp_path, "ddp_worker_killed.py", "--at", "5")
    assert result.returncode == 1  # torchrun's own code for a failed rank: the error file changes no exit status
    cause = root_cause(result.stderr)
    assert "rank      : 1 (local_rank: 1)" in cause
    # Without dlprobe this section says "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    assert "dlprobe: DataLoader worker 1 (pid " in cause and ") of loader 0 was killed by SIGKILL" in cause, cause
    assert "while loading index 5" in cause
    assert "no OOM kill" in cause or "unreadable" in cause  # a kill -9 is not called an OOM kill
    # torch's own words: "(pid N) is killed by signal", or "(pid(s) N) exited unexpectedly" where its liveness check
    # reaped the worker first (the signal is then read from the Process that reaped it)
    assert "torch said: DataLoader worker (pid " in cause or "torch said: DataLoader worker (pid(s) " in cause
    assert f"dlprobe report {result.run_dir}" in cause
    assert_no_probe_frames(cause)
    [killed] = result.findings("worker-killed")
    assert killed["evidence"]["index"] == 5 and f"(pid {killed['evidence']['pids'][0]})" in cause


def test_a_scripts_own_record_is_enriched_not_replaced(tmp_path: Path) -> None:
    # @record writes torch's "DataLoader worker ... exited unexpectedly" with its own traceback before dlprobe's
    # excepthook runs: the cause goes in front of it, the traceback @record took (through its wrapper) stays.
    result = run_job(tmp_path, "ddp_worker_killed.py", "--record")
    assert result.returncode == 1
    cause = root_cause(result.stderr)
    assert "dlprobe: DataLoader worker 1 (pid " in cause and "while loading index 5" in cause, cause
    assert "elastic/multiprocessing/errors/__init__.py" in cause and "in wrapper" in cause  # @record's traceback
    assert cause.index("dlprobe: DataLoader worker") < cause.index("Traceback (most recent call last)")
    assert_no_probe_frames(cause)  # @record formatted it with the hooks' frames on it: they are taken out


def test_a_more_specific_error_of_the_scripts_own_record_is_left_alone(tmp_path: Path) -> None:
    result = run_job(tmp_path, "ddp_worker_killed.py", "--record", "--own-error")
    assert result.returncode == 1
    cause = root_cause(result.stderr)
    assert "ValueError: rank 1: shard 7 of the training set could not be read" in cause, cause
    assert "dlprobe: DataLoader worker" not in cause


def test_an_oom_killed_worker_is_named_as_the_oom_killers_in_torchruns_summary(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    torchrun = [*torchrun_command(), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                str(free_port()), str(SCRIPTS / "ddp_torchrun.py"), "--oom", "1:7"]  # fmt: skip
    with memory_cgroup(1536 * MiB) as group:
        command = (
            f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m dlprobe run --quiet --out {run_dir} -- "
            + " ".join(torchrun)
        )
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    cause = root_cause(proc.stderr)
    assert "rank      : 1 (local_rank: 1)" in cause
    assert "was killed by the kernel's OOM killer at its memory cgroup's limit (SIGKILL)" in cause, cause
    assert "while loading index 7" in cause
    assert "kernel log: " in cause or "memory cgroup: " in cause  # the evidence that it was the OOM killer


def test_a_hang_stopped_by_dlprobe_is_torchruns_root_cause(tmp_path: Path) -> None:
    # --on-hang stop ends a torchrun job through its stalled rank, so the agent prints its summary: stopping
    # torchrun itself ends in SignalException and no summary at all.
    stop = ["--hang-timeout", "4", "--on-hang", "stop"]
    result = run_job(tmp_path, "ddp_torchrun.py", "--block", "1:13", options=stop)
    assert result.returncode == 1, result.stderr[-3000:]  # torchrun's own code for a failed rank
    cause = root_cause(result.stderr)
    assert "rank      : 1 (local_rank: 1)" in cause and "(SIGTERM)" in cause
    assert "dlprobe: DataLoader worker " in cause and " of loader 0 hung on index 13" in cause, cause
    assert "dlprobe stopped the rank (--on-hang stop)" in cause
    record = json.loads((result.run_dir / "hangs" / "hang-1.json").read_text())
    [stuck] = [p for p in record["processes"] if 13 in ((p.get("inflight") or {}).get("indices") or [])]
    assert f"(pid {stuck['pid']})" in cause
    if stuck.get("stack"):  # py-spy (or faulthandler) read it: the line of the script's it waits at
        assert "in Squares.__getitem__ (ddp_torchrun.py:" in cause
    result_file = json.loads((result.run_dir / "result.json").read_text())
    assert result_file["stop_reason"] == "hang" and result_file["survivors"] == []
