"""The cause of a hang the supervisor writes into a torchrun rank's error file before `--on-hang stop` ends it, read
back by torchelastic's own ProcessFailure (the agent's code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlprobe.supervisor.hang import elastic_hang

RECORD: dict[str, Any] = {
    "waited_s": 61.7,
    "main_pid": 100,
    "loop": {"state": "waiting", "loader_id": 0, "awaited_worker": 1},
    "processes": [
        {"pid": 100, "role": "main"},
        {"pid": 101, "role": "worker", "main_pid": 100, "loader_id": 0, "worker_id": 0, "inflight": {"index": 4}},
        {"pid": 102, "role": "worker", "main_pid": 100, "loader_id": 0, "worker_id": 1, "inflight": {"index": 13},
         "stack": [{"frames": [{"name": "wait", "file": "/usr/lib/python3.11/threading.py", "line": 320},
                               {"name": "__getitem__", "file": "/work/train.py", "line": 30}]}]},
    ],
}  # fmt: skip


def test_the_verdict_names_the_awaited_worker_its_index_and_line():
    line, evidence = elastic_hang.verdict(RECORD)
    assert line == (
        "DataLoader worker 1 (pid 102) of loader 0 hung on index 13 in __getitem__ (train.py:30): no batch for 62 s; "
        "dlprobe stopped the rank (--on-hang stop)"
    )
    assert evidence["pid"] == 102 and evidence["index"] == 13 and evidence["cause"] == "hang"


def test_the_agent_reads_it_as_the_root_cause(tmp_path: Path):
    errors = pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    path = tmp_path / "error.json"
    elastic_hang.write_cause(RECORD, str(path), tmp_path / "run", 1_800_000_000.0)
    failure = errors.ProcessFailure(local_rank=1, pid=100, exitcode=-15, error_file=str(path))
    summary = errors.ChildFailedError("train.py", {1: failure}).format_msg()
    assert "dlprobe: DataLoader worker 1 (pid 102) of loader 0 hung on index 13" in summary
    assert failure.timestamp == 1_800_000_000
    assert json.loads(path.read_text())["message"]["extraInfo"]["dlprobe"]["waited_s"] == 61.7


def test_the_error_file_is_read_from_the_ranks_environment():
    env = {"TORCHELASTIC_ERROR_FILE": "/tmp/attempt_0/1/error.json", "PATH": "/usr/bin:/bin"}
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"  # exec'd: /proc/PID/environ is its own
        assert elastic_hang.error_file_of(child.pid) == "/tmp/attempt_0/1/error.json"
    finally:
        child.communicate(b"")
    assert elastic_hang.error_file_of(child.pid) is None  # gone: nothing to write, the run is stopped as before
