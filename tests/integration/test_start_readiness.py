"""Start-method readiness on real runs: what would break under forkserver (Python 3.14's default on Linux) is named
on a run under fork, before it breaks, and the same names come with a run where forkserver is forced."""

from __future__ import annotations

import os
import re
from pathlib import Path

START_METHOD_SITE = Path(__file__).resolve().parent.parent / "start_method"


def forced(method: str) -> dict[str, str]:
    """tests/start_method/sitecustomize.py makes `method` every process's default, as Python 3.14 does forkserver."""
    path = os.pathsep.join(p for p in (str(START_METHOD_SITE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "DLPROBE_TEST_START_METHOD": method}


def test_a_lambda_under_the_default_fork_is_named_before_forkserver_breaks_on_it(probe) -> None:
    result = probe("lambda_in_init_dataset.py")
    assert result.returncode == 0 and "total 85344" in result.stdout  # the training is the same
    (finding,) = result.findings("start-method")
    assert finding["severity"] == "warning"
    assert "`self.transform` of the dataset is a lambda" in finding["title"]
    assert finding["evidence"]["blockers"][0]["kind"] == "lambda"
    assert "start-method" in result.stderr  # the terminal shows it


def test_the_same_lambda_with_forkserver_forced_is_named_as_its_workers_fail(probe) -> None:
    result = probe("lambda_in_init_dataset.py", env=forced("forkserver"))
    # the script's own error, in its Python's words ("Can't get local object" on 3.13)
    assert result.returncode != 0 and re.search(r"Can't (pickle|get) local object", result.stderr)
    (loader,) = result.report["loaders"]
    assert loader["start_readiness"].startswith("forkserver (chosen by the script); forkserver and spawn would fail")
    assert "`self.transform` of the dataset is a lambda" in loader["start_readiness"]


def test_a_loop_without_a_main_guard_is_named_with_its_line(probe) -> None:
    result = probe("loop_without_main_guard.py")
    assert result.returncode == 0
    (finding,) = result.findings("start-method")
    assert "loop_without_main_guard.py:17" in finding["title"]
    assert finding["evidence"]["main_script"]["guarded"] is False


def test_a_guarded_healthy_loader_gets_one_line_and_no_finding(healthy_run) -> None:
    result = healthy_run
    assert result.returncode == 0 and result.findings("start-method") == []
    (loader, *_) = result.report["loaders"]
    assert "the dataset pickles" in loader["start_readiness"]
    # What the start-up prediction is made of, read in the real training process: the main thread's CPU a worker would
    # run again, the share of a core just before the loop, and the fork server this Python would start
    import json

    (ready,) = [e for e in map(json.loads, (result.run_dir / "events.jsonl").read_text().splitlines())
                if e["ev"] == "start_readiness"]  # fmt: skip
    assert ready["main"]["redo_cpu_s"] > 0 and ready["main"]["guarded_cpu_s"] >= 0
    assert 0 < ready["share_now"] <= 1 and ready["share_now_runnable_s"] > 0
    assert ready["forkserver"]["running"] is False and ready["forkserver"]["preload"] == ["__main__"]
    assert ready["pickle_cpu_s"] >= 0 and ready["buffer_bytes"] >= 0
