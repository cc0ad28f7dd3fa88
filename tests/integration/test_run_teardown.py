"""A training process killed by the kernel's OOM killer: its workers' last readings are teardown, never growth."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import SCRIPTS, memory_cgroup

MAIN_KILLED = str(SCRIPTS / "main_killed_by_oom.py")
MiB = 1024 * 1024


def _worker_uss(run_dir: Path, main_pid: int) -> tuple[float, dict[int, int], dict[int, int]]:
    """(when the main process was seen gone; each worker's highest USS before it, and at or after it), from the raw
    samples: what the sampler read, before any analysis."""
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip()]
    gone = next(r["t"] for r in rows if r["k"] == "gone" and r["pid"] == main_pid)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    workers = {int(w["pid"]) for e in events if e.get("ev") == "epoch" for w in e.get("workers") or []}
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    for r in rows:
        for pid_text, vals in (r.get("p") or {}).items() if r["k"] == "s" else ():
            if int(pid_text) in workers and vals.get("uss") is not None:
                side = before if r["t"] < gone else after
                side[int(pid_text)] = max(side.get(int(pid_text), 0), vals["uss"])
    return gone, before, after


def test_workers_readings_after_the_oom_killed_main_process_are_teardown(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with memory_cgroup(900 * MiB) as group:
        command = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m dlprobe run --quiet --out {run_dir} "
        proc = subprocess.run(
            ["sh", "-c", command + f"{MAIN_KILLED} 2"], capture_output=True, text=True, timeout=180, cwd=tmp_path
        )
    assert proc.returncode == -signal.SIGKILL, proc.stderr  # dlprobe dies of its script's signal
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    killed = next(f for f in report["findings"] if f["code"] == "script-killed")
    assert killed["evidence"]["cause"] == "oom"
    main_pid = killed["evidence"]["pid"]
    gone, before, after = _worker_uss(run_dir, main_pid)
    assert before and max(before.values()) < 64 * MiB, before  # modest copy-on-write while the main process lived
    # The scenario itself: the last worker alive mapped the dead parent's pages alone, and the sampler read it.
    assert any(after.get(pid, 0) > 2 * b for pid, b in before.items()), (before, after)
    # The cut is named, and no worker is said to hold or copy more than twice what it held before the death.
    assert "are teardown: left out" in killed["detail"]
    assert killed["evidence"]["teardown_pid"] == main_pid
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    assert workers and all(p.get("teardown_readings", 0) > 0 for p in workers if p["pid"] in after)  # worker 0 may
    # exit within the tick that saw the main process gone: nothing of it to cut then
    for p in workers:
        assert p["uss"]["peak"] <= 2 * before[p["pid"]], (p, before)
    for finding in report["findings"]:
        for row in finding["evidence"].get("workers") or []:
            held = 2 * before.get(row.get("pid"), 0)
            for key in ("uss_peak_bytes", "uss_growth_bytes", "cow_bytes"):
                assert (row.get(key) or 0) <= held, (finding["code"], key, row, before)
        if finding["code"] == "cow-growth":
            assert "are teardown: left out" in finding["detail"]
