"""`dlprobe run --start-method`: the workers really start with the method asked for, the script's own choice is
overridden and said, a worker that cannot start under spawn names why, and `dlprobe compare` sets two runs side by
side. Four real runs, started together once for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import SCRIPTS, DlprobeResult, background_plotters, run_dlprobe
from tests.schema_check import problems

RUNS = {
    # name: (options, script)
    "lambda": (["--start-method", "spawn"], "lambda_transform_dataset.py"),
    "no_guard": (["--start-method", "spawn", "--hang-timeout", "0"], "no_main_guard.py"),
    # forkserver before CPython 3.13.8 imports the script again in each worker, as spawn does (Python 3.14's default)
    "no_guard_forkserver": (["--start-method", "forkserver", "--hang-timeout", "0"], "no_main_guard.py"),
    "forkserver": (["--start-method", "forkserver", "--hang-timeout", "0"], "prints_worker_start_method.py"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DlprobeResult]]:
    base = tmp_path_factory.mktemp("start_method")
    env = {**os.environ, "COLUMNS": "120"}
    started: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for name, (options, script) in RUNS.items():
        run_dir = base / name
        cmd = [sys.executable, "-m", "dlprobe", "run", "--out", str(run_dir), *options, str(SCRIPTS / script)]
        started[name] = (subprocess.Popen(cmd, cwd=base, env=env, text=True, stdout=-1, stderr=-1), run_dir)
    results = {}
    for name, (proc, run_dir) in started.items():
        out, err = proc.communicate(timeout=400)
        results[name] = DlprobeResult(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), run_dir)
    yield results
    psutil.wait_procs(background_plotters(base), timeout=60)
    for result in results.values():
        report = result.run_dir / "report.json"
        if report.exists():
            assert not problems(json.loads(report.read_text())), report


def _one(result: DlprobeResult, code: str) -> dict[str, Any]:
    found = result.findings(code)
    assert len(found) == 1, (code, [f["code"] for f in result.report["findings"]], result.stderr[-3000:])
    return found[0]


def test_a_lambda_in_the_dataset_under_spawn_names_the_attribute(runs: dict[str, DlprobeResult]) -> None:
    result = runs["lambda"]
    assert result.returncode == 1  # the script's own failure, as plain python under spawn gives it
    finding = _one(result, "worker-start-failed")
    ev = finding["evidence"]
    assert ev["failure"] == "unpicklable" and ev["start_method"] == "spawn"
    assert ev["attribute_path"] == "dataset.transform"
    assert "lambda" in ev["pickle_reason"] and "main" in ev["pickle_reason"]
    assert "dataset.transform" in finding["title"]
    assert result.report["verdict"]["code"] == "worker-start-failed"


@pytest.mark.parametrize("run", ["no_guard", "no_guard_forkserver"])
def test_a_script_without_main_guard_names_the_guard_and_its_line(runs: dict[str, DlprobeResult], run: str) -> None:
    result = runs[run]
    assert result.returncode == 1
    finding = _one(result, "worker-start-failed")
    ev = finding["evidence"]
    assert ev["failure"] == "main-guard"
    assert ev["file"].endswith("no_main_guard.py")
    lines = (SCRIPTS / "no_main_guard.py").read_text().splitlines()
    assert "for b in loader" in lines[ev["line"] - 1]
    assert '__name__ == "__main__"' in finding["title"]
    assert ev["pids"] and set(ev["pids"]) <= {w["pid"] for lo in result.report["loaders"] for w in lo["workers"]}
    # torch's "exited unexpectedly" and the rest are what it explains, not a second story
    assert result.report["verdict"]["code"] == "worker-start-failed"
    assert "bootstrapping phase" in result.stderr  # the worker's own error still reaches the terminal


def test_start_method_changes_the_workers_method_and_says_what_it_overrode(runs: dict[str, DlprobeResult]) -> None:
    result = runs["forkserver"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "worker start methods: forkserver\n" in result.stdout  # read by the workers themselves
    assert json.loads((result.run_dir / "meta.json").read_text())["start_method_forced"] == "forkserver"
    assert result.report["loaders"][0]["start_method"] == "forkserver"
    forced = _one(result, "start-method-forced")
    assert forced["evidence"]["overridden"] == [{"loader": 0, "script_choice": "fork"}]
    assert "overridden" in forced["detail"] and "overriding the script's own fork" in forced["title"]


def test_compare_prints_both_runs_side_by_side(runs: dict[str, DlprobeResult], tmp_path: Path) -> None:
    a, b = runs["forkserver"].run_dir, runs["lambda"].run_dir
    proc = run_dlprobe(["compare", str(a), str(b), "--json", str(tmp_path / "c.json")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "forkserver (--start-method)" in out and "spawn (--start-method)" in out
    assert "USS per worker" in out and "time to first batch" in out
    assert "only in B: " in out and "worker-start-failed" in out.split("only in B: ")[1]
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["a"]["script"].endswith("prints_worker_start_method.py")
    assert saved["b"]["script"].endswith("lambda_transform_dataset.py")
    assert saved["a"]["loaders"]["0"]["batches"] == 2 and saved["a"]["loaders"]["0"]["batches_per_s"] > 0
    assert saved["a"]["loaders"]["0"]["worker_uss_peak"] > 0


def test_compare_refuses_a_directory_that_is_no_run(tmp_path: Path) -> None:
    proc = run_dlprobe(["compare", str(tmp_path), str(tmp_path)], tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_tune_under_forkserver_measures_trials_with_workers(tmp_path: Path) -> None:
    """Each forkserver worker imports the script again before its first batch (here it sleeps 12 s there, longer than
    a trial's share of the 50 s budget): the trial's window starts at that batch, and the start is bounded by the
    sweep's budget, not a batch's timeout. A later trial that would not start within what is left is skipped."""
    json_path = tmp_path / "tune.json"
    # --loop-steps 0: taken over at the script's first iteration, before its own workers start
    proc = run_dlprobe(["tune", "--out", str(tmp_path / "t"), "--json", str(json_path), "--budget", "50s",
                        "--loop-steps", "0", "--batches", "8", "--max-workers", "1",
                        str(SCRIPTS / "slow_worker_start.py"), "forkserver", "12"], tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = json.loads(json_path.read_text())["trials"]
    with_workers = [t for t in trials if t["num_workers"] >= 1]
    measured = [t for t in with_workers if t["status"] == "ok" and t["samples_per_s"]]
    assert measured, [(t["key"], t["status"], t.get("error"), t.get("first_batch_s")) for t in with_workers]
    assert measured[0]["first_batch_s"] >= 12  # the start it waited for
    assert not [t for t in with_workers if t["status"] == "hung"], with_workers
