"""trace.json from real runs (a leaky run, a hang, a torchrun job), checked for structure and, where Chromium and
vizviewer are here, loaded in the real Perfetto UI."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dlprobe
from tests.perfetto import load_in_perfetto, missing, process_names, structure_problems


def _trace(path: Path) -> dict[str, Any]:
    trace = json.loads(path.read_text())
    assert structure_problems(trace) == []
    return trace


def _names(trace: dict[str, Any], ph: str) -> list[str]:
    return [e["name"] for e in trace["traceEvents"] if e["ph"] == ph]


def _worker_batches(trace: dict[str, Any]) -> dict[int, int]:
    """Batch slices per trace pid."""
    found: dict[int, int] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["name"].startswith("batch "):
            found[e["pid"]] = found.get(e["pid"], 0) + 1
    return found


def test_leaky_run_has_a_track_per_worker_with_its_batches_and_memory(leaky_list_run):
    result = leaky_list_run
    assert result.returncode == 0, result.stderr
    trace = _trace(result.run_dir / "trace.json")
    names = process_names(trace)
    pids = {p["pid"] for p in result.report["processes"] if p["role"] in ("main", "worker")}
    assert len(names) == 4 and names[0].startswith("main (pid ") and names[-1] == "system"
    assert [n.split(" (pid")[0] for n in names[1:3]] == ["loader 0 / worker 0", "loader 0 / worker 1"]
    assert {int(n.rsplit("pid ", 1)[1].rstrip(")")) for n in names[:3]} == pids
    assert sorted(_worker_batches(trace)) == [2, 3]  # both workers' batches, on their own tracks
    waits = [e for e in trace["traceEvents"] if e["name"] == "wait"]
    assert len(waits) == sum(lo["batches"] for lo in result.report["loaders"])
    assert {"USS / RSS (MiB)", "PSS by kind (MiB)", "/dev/shm used (MiB)"} <= set(_names(trace, "C"))
    assert "warning: cow-growth" in _names(trace, "i")


def test_a_hang_is_an_instant_on_the_stalled_process(worker_hang_run):
    proc, run_dir = worker_hang_run, worker_hang_run.run_dir
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    trace = _trace(run_dir / "trace.json")
    assert [n.split(" (pid")[0] for n in process_names(trace)] == [
        "main", "loader 0 / worker 0", "loader 0 / worker 1", "system"]  # fmt: skip
    instants = _names(trace, "i")
    assert "hang 1" in instants and "error: worker-hang" in instants
    stuck = [(e["pid"], e["name"]) for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] % 10_000 == 999]
    assert stuck == [(1, "waiting for batch 6 (worker 0) at the end"), (2, "getitem of index 13 at the end")]
    # both workers' batches, though neither sent them (stopped, and idle behind the stuck one): from their slots
    batches = {pid: [e["name"] for e in trace["traceEvents"] if e["pid"] == pid and e["name"].startswith("batch ")]
               for pid in (2, 3)}  # fmt: skip
    assert batches[2][:3] == ["batch 0", "batch 2", "batch 4"] and batches[3][:3] == ["batch 1", "batch 3", "batch 5"]


def test_torchrun_job_has_a_track_per_rank_and_worker_and_report_merges_it(ddp_leaky_list_job, tmp_path):
    result = ddp_leaky_list_job
    assert result.returncode == 0, result.stderr
    trace = _trace(result.run_dir / "trace.json")
    labels = [n.split(" (pid")[0] for n in process_names(trace)]
    assert labels == ["rank 0", "rank 0 / loader 0 / worker 0", "rank 0 / loader 0 / worker 1",
                      "rank 1", "rank 1 / loader 0 / worker 0", "rank 1 / loader 0 / worker 1", "system"]  # fmt: skip
    assert len(_worker_batches(trace)) == 4
    out = tmp_path / "job-trace.json"
    proc = run_dlprobe(["report", str(result.run_dir), "--trace", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert process_names(_trace(out)) == process_names(trace)


@pytest.mark.slow
def test_perfetto_loads_the_trace_with_one_named_track_per_process(request, tmp_path):
    reason = missing()
    if reason:
        pytest.skip(f"no real viewer here: {reason}")
    result = request.getfixturevalue("leaky_list_run")  # only once a viewer is here: the run is not made to skip
    assert result.returncode == 0, result.stderr
    names = process_names(json.loads((result.run_dir / "trace.json").read_text()))
    text = load_in_perfetto(result.run_dir / "trace.json", tmp_path / "perfetto.png", names)
    for name in names:  # Perfetto shows each process group by its name, once or more
        assert name in text, f"{name} not among Perfetto's tracks"
    positions = [text.index(name) for name in names]
    assert positions == sorted(positions), "Perfetto shows the processes in the trace's order: main, then workers"
    assert "Data-loss/import error" not in text
    assert (tmp_path / "perfetto.png").stat().st_size > 10_000
