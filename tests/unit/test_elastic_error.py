"""The error file a dying torchrun rank writes, read back by torchelastic's own ProcessFailure and ChildFailedError
(ground truth: the agent's code, not a copy of its format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure  # noqa: E402

from dlprobe.frames import PROBE_DIR  # noqa: E402
from dlprobe.in_training import elastic_error  # noqa: E402
from dlprobe.in_training.death_cause import WorkerDeath, from_exception  # noqa: E402
from dlprobe.rundir import elastic_file  # noqa: E402

TORCH_KILLED = "DataLoader worker (pid 4711) is killed by signal: Killed. "


def oom_death() -> WorkerDeath:
    return WorkerDeath(4711, "SIGKILL", None, "oom", loader_id=0, worker_id=1, index=7,
                       seen={"kernel_log": "Killed process 4711 (python) total-vm:1kB", "cgroup": True},
                       torch_message=TORCH_KILLED.strip())  # fmt: skip


def raised(message: str) -> RuntimeError:
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        return exc


def summary_of(path: Path) -> tuple[ProcessFailure, str]:
    failure = ProcessFailure(local_rank=1, pid=999, exitcode=1, error_file=str(path))
    return failure, ChildFailedError("train.py", {1: failure}).format_msg()


def test_a_new_file_is_what_the_agent_prints_as_the_root_cause(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    data = elastic_error.merged(None, raised(TORCH_KILLED), oom_death(), 1_800_000_000.5)
    assert data is not None
    path.write_text(json.dumps(data))
    failure, summary = summary_of(path)
    assert failure.timestamp == 1_800_000_000
    line = "dlprobe: DataLoader worker 1 (pid 4711) of loader 0 was killed by the kernel's OOM killer at its memory"
    assert line in summary and "while loading index 7" in summary
    assert "kernel log: Killed process 4711" in summary and "RuntimeError: DataLoader worker (pid 4711)" in summary
    assert data["message"]["extraInfo"]["dlprobe"]["cause"] == "oom"


def test_records_own_file_of_the_same_death_keeps_its_traceback_and_time(tmp_path: Path) -> None:
    extra = {"py_callstack": "Traceback: @record's own", "timestamp": "1700000000"}
    theirs = {"message": {"message": f"RuntimeError: {TORCH_KILLED}", "extraInfo": extra}}
    data = elastic_error.merged(json.loads(json.dumps(theirs)), raised(TORCH_KILLED), oom_death(), 1_800_000_000)
    assert data is not None
    path = tmp_path / "error.json"
    path.write_text(json.dumps(data))
    failure, summary = summary_of(path)
    assert failure.timestamp == 1_700_000_000  # when @record saw it: the root cause keeps its place in time
    assert summary.index("dlprobe: DataLoader worker 1") < summary.index("Traceback: @record's own")
    assert elastic_error.merged(data, raised(TORCH_KILLED), oom_death(), 1) is None  # once is enough


def test_a_more_specific_error_of_the_scripts_is_left_alone() -> None:
    theirs = {"message": {"message": "ValueError: shard 7 is unreadable",
                          "extraInfo": {"py_callstack": "...", "timestamp": "1700000000"}}}  # fmt: skip
    assert elastic_error.merged(theirs, raised(TORCH_KILLED), oom_death(), 1) is None
    assert elastic_error.merged({"message": "a string of someone else's"}, raised(TORCH_KILLED), oom_death(), 1) is None


def test_a_sigkill_without_an_oom_record_is_not_called_an_oom_kill() -> None:
    death = WorkerDeath(4711, "SIGKILL", None, "unknown", worker_id=0, loader_id=0, seen={"kernel_log_readable": True})
    assert "OOM killer" not in death.verdict().replace("no OOM kill", "")
    assert "from outside" in death.verdict()


def test_the_chain_text_that_says_how_wins() -> None:
    try:
        try:
            raise RuntimeError("DataLoader worker (pid 4711) is killed by signal: Segmentation fault. ")
        except RuntimeError as inner:
            raise RuntimeError("DataLoader worker (pid(s) 4711) exited unexpectedly") from inner
    except RuntimeError as outer:
        death = from_exception(outer)
    assert death is not None and death.cause == "segfault" and death.signal == "SIGSEGV"
    assert from_exception(RuntimeError("CUDA out of memory")) is None


def test_a_failure_to_write_is_a_probe_problem_never_the_ranks(tmp_path: Path, monkeypatch) -> None:
    recorded = []
    monkeypatch.setattr(elastic_error.probe_errors, "record", lambda where, exc, why: recorded.append(where))
    monkeypatch.setenv(elastic_error.ERROR_FILE_ENV, str(tmp_path / "no-such-dir" / "error.json"))
    monkeypatch.setattr(elastic_error, "_written_pid", None)
    elastic_error.write_cause(raised(TORCH_KILLED))  # raises nothing
    assert recorded == ["elastic_error.write"]


def test_dlprobes_frames_leave_records_traceback_and_the_scripts_stay() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 55, in main\n'
        "    for batch in loader:\n"
        f'  File "{PROBE_DIR}in_training/hand_over.py", line 48, in timed_get\n'
        "    item = get(owner(), *args, **kwargs)\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 113, in get\n'
        "    if not self._poll(timeout):\n"
        "RuntimeError: DataLoader worker (pid 4711) is killed by signal: Killed.\n"
    )
    cleaned = elastic_file.without_probe_frames(text)
    assert PROBE_DIR not in cleaned and "timed_get" not in cleaned and "^^^" not in cleaned
    assert cleaned == text.replace(text[text.index(f'  File "{PROBE_DIR}') : text.index('  File "/usr/lib')], "")
