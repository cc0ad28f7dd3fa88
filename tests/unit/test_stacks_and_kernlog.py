"""Parsing py-spy JSON and faulthandler text into one frame model; OOM lines from the kernel log."""

from __future__ import annotations

import os

from dlprobe.supervisor.hang import stacks
from dlprobe.system import kernlog

USER_FILE = "/home/u/project/train.py"
TORCH_FILE = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py"

PY_SPY = [
    {
        "thread_name": "MainThread",
        "os_thread_id": 7,
        "active": False,
        "frames": [
            {"name": "read", "filename": "/usr/lib/libc.so.6", "module": "/usr/lib/libc.so.6", "line": 0},
            {"name": "Dataset.misbehave", "filename": USER_FILE, "module": None, "line": 54},
            {"name": "_MapDatasetFetcher.fetch", "filename": TORCH_FILE, "module": None, "line": 52},
        ],
    }
]

FAULTHANDLER = f"""Thread 0x00007f1 (most recent call first):
  File "/lib/python3.11/threading.py", line 327 in wait

Current thread 0x00007f0 (most recent call first):
  File "{USER_FILE}", line 54 in misbehave
  File "{TORCH_FILE}", line 52 in fetch
"""


def test_py_spy_json_marks_native_and_user_frames():
    [thread] = stacks.parse_py_spy(PY_SPY)
    frames = thread["frames"]
    assert [f["native"] for f in frames] == [True, False, False]
    assert [f["user"] for f in frames] == [False, True, False]
    assert thread["name"] == "MainThread" and frames[1]["line"] == 54


def test_faulthandler_text_gives_the_same_model():
    threads = stacks.parse_faulthandler(FAULTHANDLER)
    assert [t["name"] for t in threads] == [None, "current"]
    assert [(f["name"], f["line"], f["user"]) for f in threads[1]["frames"]] == [
        ("misbehave", 54, True),
        ("fetch", 52, False),
    ]


def test_source_lines_are_attached_where_the_file_is_readable(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("a = 1\nwith LOCK:\n    pass\n")
    [thread] = stacks.parse_faulthandler(
        f'Current thread 0x1 (most recent call first):\n  File "{script}", line 2 in f\n'
    )
    assert thread["frames"][0]["code"] == "with LOCK:"


def test_stdlib_and_dlprobe_are_not_user_code():
    assert not stacks.is_user_file(os.__file__)
    assert not stacks.is_user_file(stacks.__file__)
    assert not stacks.is_user_file("<frozen runpy>")
    assert stacks.is_user_file(USER_FILE)


RECORDS = [
    (5.0, "Memory cgroup out of memory: Killed process 11 (pt_data_worker) total-vm:1240288kB, "
          "anon-rss:565068kB, file-rss:21788kB, shmem-rss:0kB, UID:0 pgtables:1396kB oom_score_adj:0"),
    (6.0, "Out of memory: Killed process 99 (python) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"),
    (1.0, "Memory cgroup out of memory: Killed process 12 (pt_data_worker) anon-rss:1kB"),
]  # fmt: skip


def test_oom_kills_for_our_pids_after_the_start():
    found = kernlog.oom_kills({11, 12}, after_s=2.0, records=RECORDS)
    assert found["readable"] is True
    [kill] = found["kills"]
    assert kill["pid"] == 11 and kill["cgroup"] is True and kill["anon_rss_bytes"] == 565068 * 1024


def test_kmsg_records_and_dmesg_text_go_through_one_parser():
    """The run's kmsg reader merges the `oom-kill:` line (constraint, memcg) the way triage's dmesg reader does."""
    info = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),task_memcg=/docker/abc,task=pt_data_worker,pid=13,uid=0"
    )
    killed = "Killed process 13 (pt_data_worker) total-vm:1kB, anon-rss:2048kB, file-rss:0kB, shmem-rss:4096kB"
    [kill] = kernlog.oom_kills({13}, after_s=0.0, records=[(3.0, info), (3.0, killed)])["kills"]
    assert kill["cgroup"] is True and kill["memcg"] == "/docker/abc"
    assert (kill["anon_rss_bytes"], kill["shmem_rss_bytes"]) == (2048 * 1024, 4096 * 1024)
    [text_kill] = kernlog.parse_oom_lines([f"[    3.000000] {info}", f"[    3.000000] {killed}"], boot_time=100.0)
    assert (text_kill.pid, text_kill.memcg, text_kill.cgroup, text_kill.time) == (13, "/docker/abc", True, 103.0)


def test_unreadable_kernel_log_is_said_so(tmp_path):
    assert kernlog.read_records(str(tmp_path / "no-kmsg")) is None


def _fake_py_spy(tmp_path, body: str) -> str:
    exe = tmp_path / "py-spy"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return str(exe)


def test_ptrace_refusal_is_reported_as_a_permission_problem(tmp_path):
    exe = _fake_py_spy(tmp_path, 'echo "Error: Failed to attach: Operation not permitted (os error 1)" >&2\nexit 1\n')
    result = stacks.py_spy_dump(exe, os.getpid())
    assert result.permission_denied and "Operation not permitted" in result.error and not result.threads


def test_a_dump_failure_quotes_py_spys_message_not_its_backtrace(tmp_path):
    from tests.unit.test_probe_findings import ENDED_STDERR

    (tmp_path / "stderr.txt").write_text(ENDED_STDERR.replace("Error: No python processes found", "Error: Nope"))
    result = stacks.py_spy_dump(_fake_py_spy(tmp_path, f'cat "{tmp_path / "stderr.txt"}" >&2\nexit 1\n'), os.getpid())
    assert result.error == "Nope in process 20334 or any of its subprocesses"


def test_native_unwinding_failure_falls_back_to_python_frames(tmp_path):
    thread = '[{"thread_name": "MainThread", "frames": []}]'
    body = f'case "$*" in *--native*) echo "native unwinding failed" >&2; exit 1;; esac\necho \'{thread}\'\n'
    result = stacks.py_spy_dump(_fake_py_spy(tmp_path, body), os.getpid())
    assert result.tool == "py-spy" and result.threads[0]["name"] == "MainThread"
