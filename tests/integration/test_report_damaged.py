"""`dlprobe report` (a real subprocess) on saved run directories that are damaged, or whose analysis fails: a report
of what could be read, or one `error:` line with exit code 2, and never a traceback."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_dlprobe
from tests.damage import FIXTURES, damaged_copy

pytestmark = pytest.mark.damaged


def test_an_analyzer_that_raises_costs_only_its_own_findings(tmp_path: Path):
    # sitecustomize runs in the `dlprobe report` process before the CLI: it plants a bug in one analyzer.
    (tmp_path / "plant").mkdir()
    (tmp_path / "plant" / "sitecustomize.py").write_text(
        "import dlprobe.analysis as analysis\n"
        "def find_input_bound(run):\n"
        "    raise ZeroDivisionError('planted in find_input_bound')\n"
        "at = [a.__name__ for a in analysis.ANALYZERS].index('find_input_bound')\n"
        "analysis.ANALYZERS[at] = find_input_bound\n"
    )
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    proc = run_dlprobe(["report", str(run_dir)], tmp_path, env={"PYTHONPATH": str(tmp_path / "plant")})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    report = json.loads((run_dir / "report.json").read_text())
    [failed] = [f for f in report["findings"] if f["evidence"].get("where") == "find_input_bound"]
    assert failed["code"] == "probe-degraded" and failed["evidence"]["missing"] == ["input-bound"]
    assert failed["evidence"]["type"] == "ZeroDivisionError"
    assert "cow-growth" in {f["code"] for f in report["findings"]}  # the other analyzers still report
    assert "dlprobe's analyzer find_input_bound failed with ZeroDivisionError" in proc.stdout
    assert (run_dir / "report.html").exists() and (run_dir / "memory.png").exists()


def test_a_directory_cut_short_is_reported_with_what_could_not_be_read(tmp_path: Path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    (run_dir / "result.json").write_text("{")
    (run_dir / "meta.json").write_text('["not", "an", "object"]')
    samples = run_dir / "samples.jsonl"
    samples.write_bytes(samples.read_bytes()[:-40])
    proc = run_dlprobe(["report", str(run_dir)], tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "Could not read all of the run directory: meta.json: a JSON list, not an object" in proc.stdout
    report = json.loads((run_dir / "report.json").read_text())
    assert [p["file"] for p in report["read_problems"]] == ["meta.json", "result.json", "samples.jsonl"]


def test_nothing_readable_is_one_error_line_and_exit_2(tmp_path: Path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "meta.json").write_text("\x00\x01")
    proc = run_dlprobe(["report", str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: nothing in ") and lines[1].startswith("hint: ") and len(lines) == 2


@pytest.mark.parametrize("seed", range(6))
def test_randomly_damaged_directories_give_a_report_or_an_error_line(tmp_path: Path, seed: int):
    run_dir, done = damaged_copy(tmp_path, 10_000 + seed, damages=random.Random(seed).randint(2, 4))
    proc = run_dlprobe(["report", str(run_dir)], tmp_path)
    assert proc.returncode in (0, 2), (done, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, (done, proc.stderr)
    if proc.returncode == 0:
        assert json.loads((run_dir / "report.json").read_text())["findings"] is not None
    else:
        assert proc.stderr.startswith("error: "), (done, proc.stderr)
