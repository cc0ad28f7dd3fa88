"""A process whose memory (smaps_rollup) the probe is refused is named, with the reason and the findings the report
lacks for it, and its USS reads "not read", never its start-up reading as a peak."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dlprobe.analysis.report.build import report_for
from dlprobe.render.terminal import processes_table

FIXTURE = Path(__file__).parent.parent / "fixtures" / "rundirs" / "leaky_list"
WORKER = 15480  # loader 0 worker 0 of the fixture: its USS grows by about 126 MiB
OTHER_UID = 65534

as_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to read as a second user"
)


@as_root
def test_the_sampler_records_a_refused_read_once_per_process_with_its_reason(tmp_path: Path):
    """A real refusal: the sampler runs as uid 65534 over a process of root's, whose smaps_rollup it may not read."""
    target = subprocess.Popen(["sleep", "60"])
    code = (
        "import io, sys\n"
        "from dlprobe.supervisor.sampler import Sampler\n"
        "out = io.StringIO()\n"
        f"s = Sampler({target.pid}, out, None)\n"
        "s.tick(1.0); s.tick(2.0); s.next_full = 0.0; s.last_full.clear(); s.tick(3.0)\n"
        "sys.stdout.write(out.getvalue())\n"
    )
    try:
        os.chmod(tmp_path, 0o755)
        proc = subprocess.run(
            ["setpriv", "--reuid", str(OTHER_UID), "--regid", str(OTHER_UID), "--clear-groups", sys.executable,
             "-c", code],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )  # fmt: skip
    finally:
        target.kill()
        target.wait()
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    unread = [r for r in records if r["k"] == "unread"]
    assert unread == [{"k": "unread", "pid": target.pid, "t": 1.0, "error": "PermissionError: Permission denied"}]
    readings = [r["p"][str(target.pid)] for r in records if r["k"] == "s"]
    assert len(readings) == 3 and all("uss" not in r and r["rss"] > 0 for r in readings)


def _run_with_unread_worker(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    samples = (run / "samples.jsonl").read_text().splitlines()
    # the refusal as the sampler writes it, after the worker's first reading
    at = next(i for i, line in enumerate(samples) if f'"{WORKER}":{{"rss"' in line and '"uss"' in line)
    unread = {
        "k": "unread",
        "pid": WORKER,
        "t": json.loads(samples[at])["t"],
        "error": "PermissionError: Permission denied",
    }
    samples.insert(at + 1, json.dumps(unread))
    (run / "samples.jsonl").write_text("\n".join(samples) + "\n")
    return run


def test_a_worker_whose_memory_was_refused_is_named_and_its_peak_is_not_read(tmp_path: Path):
    _, report = report_for(_run_with_unread_worker(tmp_path))
    [entry] = [p for p in report["processes"] if p["pid"] == WORKER]
    assert entry["memory_unread"] == "PermissionError: Permission denied"
    assert entry["uss"] == {"start": None, "peak": None, "end": None} and entry["pss"]["peak"] is None
    assert entry["rss"]["peak"] is not None  # read from statm, which was not refused
    [degraded] = [f for f in report["findings"] if f["code"] == "probe-degraded" and f["evidence"].get("processes")]
    assert degraded["evidence"]["processes"] == [
        {"pid": WORKER, "name": f"loader 0 worker 0 (pid {WORKER})", "error": "PermissionError: Permission denied"}
    ]
    assert "cow-growth" in degraded["evidence"]["missing"]
    assert "the copy-on-write growth of 1 worker(s) is not measured" in degraded["detail"]
    # the other worker's growth is still found; this one's is not claimed from its start-up reading
    for finding in report["findings"]:
        if finding["code"] == "cow-growth":
            assert WORKER not in [w.get("pid") for w in finding["evidence"].get("workers") or []]
    out = io.StringIO()
    Console(file=out, width=160).print(processes_table(report))
    [row] = [line for line in out.getvalue().splitlines() if str(WORKER) in line]
    assert row.count("not read") == 4


def test_a_run_with_every_memory_read_has_no_such_finding(tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    _, report = report_for(run)
    assert not [f for f in report["findings"] if f["code"] == "probe-degraded" and f["evidence"].get("processes")]
    assert all("memory_unread" not in p for p in report["processes"])
