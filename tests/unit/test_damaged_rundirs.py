"""Damaged run directories (cut short, fields of another type, files gone, garbage lines): the analysis and every
renderer give the report of what could be read, and say what could not; `dlprobe report` never ends in a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from dlprobe import cli
from dlprobe.analysis.report.build import report_for
from dlprobe.commands.outputs import run_html_problem
from dlprobe.render.terminal import run_summary
from tests.damage import FIXTURES, KINDS, SOURCES, damage, damaged_copy

pytestmark = pytest.mark.damaged


def render_all(run_dir: Path) -> dict:
    """report_for and every renderer of its result, in this process: the terminal summary, the page, the JSON."""
    run, report = report_for(run_dir)
    console = Console(width=120, color_system=None, record=True, file=io.StringIO())
    console.print(run_summary(report, str(run_dir)))
    run_html_problem(run_dir / "page.html", run, report)
    json.dumps(report, default=str)
    return report


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(SOURCES),
    damages=st.lists(st.tuples(st.sampled_from(KINDS), st.randoms(use_true_random=False)), min_size=1, max_size=3),
)
def test_damaged_directories_are_analyzed_and_rendered_without_raising(source, damages):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / source
        shutil.copytree(FIXTURES / source, run_dir)
        done = [damage(run_dir, rng, kind) for kind, rng in damages]
        try:
            render_all(run_dir)
        except Exception as exc:
            raise AssertionError(f"{type(exc).__name__} after: {done}") from exc


def test_a_field_of_another_type_is_skipped_and_named(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    samples = (run_dir / "samples.jsonl").read_text().splitlines()
    reading = next(i for i, line in enumerate(samples) if json.loads(line)["k"] == "s")
    bad = json.loads(samples[reading])
    bad["t"] = "soon"  # a string where a number belongs
    samples[reading] = json.dumps(bad)
    (run_dir / "samples.jsonl").write_text("\n".join(samples) + "\n")
    (run_dir / "result.json").write_text('{"exit_c')  # cut after a few bytes
    (run_dir / "events.jsonl").write_text((run_dir / "events.jsonl").read_text() + '{"ev": "batches", "t": 1.0, "lo')
    report = render_all(run_dir)
    problems = {p["file"]: p["problem"] for p in report["read_problems"]}
    assert problems == {
        "result.json": "not JSON (cut short?)",
        "samples.jsonl": "1 record of the wrong shape skipped (first: 't' is a string)",
        "events.jsonl": "1 line not JSON skipped (the last one cut short)",
    }
    [unreadable] = [f for f in report["findings"] if f["evidence"].get("where") == "run directory"]
    assert unreadable["code"] == "probe-degraded" and "samples.jsonl" in unreadable["title"]
    # what could be read is still reported
    assert {f["code"] for f in report["findings"]} >= {"cow-growth", "input-bound"}


def test_meta_json_that_is_not_an_object(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    (run_dir / "meta.json").write_text("[1, 2]")
    report = render_all(run_dir)
    assert report["read_problems"][0] == {"file": "meta.json", "problem": "a JSON list, not an object"}
    assert report["loaders"]  # events and samples still read


def dlprobe_report_in_process(run_dir: Path) -> tuple[int, str]:
    """`dlprobe report DIR` through cli.main, as the console script runs it: (exit code, stdout + stderr)."""
    out = io.StringIO()
    argv = sys.argv
    sys.argv = ["dlprobe", "report", str(run_dir)]
    code: int | str | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            cli.main()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        out.write("Traceback (raised out of cli.main)\n")
        raise
    finally:
        sys.argv = argv
    return int(code or 0), out.getvalue()


@pytest.mark.parametrize("block", range(4))
def test_hundreds_of_damaged_directories_through_dlprobe_report(tmp_path, monkeypatch, block):
    # The plot is drawn for real in the subprocess tests; matplotlib here would take minutes for no more coverage.
    monkeypatch.setattr("dlprobe.render.plot.plot_memory", lambda data, path: path)
    outcomes = []
    for seed in range(block * 75, (block + 1) * 75):
        run_dir, done = damaged_copy(tmp_path, seed, damages=random.Random(seed).randint(1, 4))
        code, output = dlprobe_report_in_process(run_dir)
        assert code in (0, 2) and "Traceback" not in output, (done, output[-2000:])
        if code == 2:
            assert output.startswith("error: ") and "\nhint: " in output, (done, output)
        else:
            assert (run_dir / "report.json").exists(), done
        outcomes.append(code)
        shutil.rmtree(run_dir)
    assert outcomes.count(0) > len(outcomes) / 2  # most damage still leaves a report


def test_real_record_shapes_are_not_taken_for_damage(tmp_path):
    # A memory cgroup's reading names the cgroup whose limit binds (a string among the numbers).
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    cgroup = {"usage": 5, "limit": 629145600, "limit_dir": "/sys/fs/cgroup/memory/x", "oom_kill": 1}
    reading = {"k": "s", "t": 1795478480.0, "p": {}, "avail": 1, "cg": cgroup}
    with (run_dir / "samples.jsonl").open("a") as f:
        f.write(json.dumps(reading) + "\n")
    report = render_all(run_dir)
    assert report["read_problems"] == [] and report["system"]["cgroup_limit"] == 629145600
