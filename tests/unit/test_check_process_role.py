"""A copy dlprobe forked for its own checks (`dlprobe-check` in /proc/PID/comm) is named as dlprobe's in the run's
processes, not as another process of the job."""

from __future__ import annotations

import json
from pathlib import Path

from dlprobe.analysis.run.model import ROLE_CHECK, load_run

MiB = 1024 * 1024


def test_dlprobes_own_copy_is_named_as_dlprobes(tmp_path: Path):
    (tmp_path / "meta.json").write_text(json.dumps({"script": "t.py", "argv": [], "started_at": 100.0,
                                                    "target_pid": 10, "machine": {}}))  # fmt: skip
    (tmp_path / "result.json").write_text(json.dumps({"exit_code": 0, "ended_at": 104.0}))
    (tmp_path / "events.jsonl").write_text("")
    samples = [
        {"k": "proc", "pid": 10, "ppid": 1, "comm": "python"},
        {"k": "proc", "pid": 12, "ppid": 10, "comm": "dlprobe-check"},
        {"k": "proc", "pid": 13, "ppid": 10, "comm": "sh"},
        {"k": "s", "t": 102.0, "p": {"10": {"rss": 90 * MiB}, "12": {"rss": 80 * MiB}, "13": {"rss": 1 * MiB}}},
    ]  # fmt: skip
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    roles = {p.pid: p.role for p in load_run(tmp_path).processes}
    assert roles == {10: "main", 12: ROLE_CHECK, 13: "other"}
