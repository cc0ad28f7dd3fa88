"""One failing part of dlprobe's own analysis or output costs only itself: an analyzer, a cross-rank check, a renderer
or a check rule that raises becomes a finding, a warning or a rule row saying so, and the rest of the report stands."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from dlprobe.analysis import ANALYZER_CODES, ANALYZERS, analyze
from dlprobe.analysis.job.findings import analyze_job
from dlprobe.analysis.job.model import split_job
from dlprobe.analysis.report.build import report_for
from dlprobe.check.config import config_from_mapping
from dlprobe.check.rules import evaluate
from dlprobe.commands.outputs import write_outputs
from dlprobe.errors import DlprobeError
from tests.damage import FIXTURES
from tests.unit import fakes
from tests.unit.check_reports import MiB, make_report
from tests.unit.test_job_findings import LEAKY, two_ranks
from tests.unit.test_memory_findings import SUSPECT, _growing


def boom(*_args, **_kwargs):
    raise TypeError("planted failure")


def test_every_analyzer_names_the_codes_a_report_lacks_without_it():
    assert sorted(ANALYZER_CODES) == sorted(a.__name__ for a in ANALYZERS)


def test_an_analyzer_that_raises_is_a_probe_degraded_finding_and_the_others_still_report(monkeypatch):
    run = fakes.run(
        [fakes.loader(suspects=[SUSPECT])],
        [fakes.parent(300 * MiB), _growing(11, 0, 200 * MiB), _growing(12, 1, 190 * MiB)],
    )
    assert "cow-growth" in [f.code for f in analyze(run)]
    monkeypatch.setattr("dlprobe.analysis.findings.memory._severity", boom)
    findings = analyze(run)
    [failed] = [f for f in findings if f.evidence.get("where") == "find_cow_growth"]
    assert failed.code == "probe-degraded" and failed.severity == "info"
    assert failed.title == "dlprobe's analyzer find_cow_growth failed with TypeError: planted failure"
    assert failed.evidence["missing"] == ["cow-growth", "mapped-pages"]
    assert failed.evidence["raised_at"].endswith(" in boom")
    assert "cow-growth" not in [f.code for f in findings]


def test_a_cross_rank_check_that_raises_keeps_the_merged_findings(monkeypatch):
    monkeypatch.setattr("dlprobe.analysis.job.findings.find_uneven_ranks", boom)
    findings = analyze_job(split_job([two_ranks(LEAKY, LEAKY)]))
    [cow] = [f for f in findings if f.code == "cow-growth"]
    assert [r["rank"] for r in cow.evidence["ranks"]] == ["rank 0", "rank 1"]
    [failed] = [f for f in findings if f.code == "probe-degraded"]
    assert failed.evidence["where"] == "find_uneven_ranks" and failed.evidence["missing"] == ["uneven-ranks"]


def test_merging_that_raises_keeps_each_ranks_findings(monkeypatch):
    monkeypatch.setattr("dlprobe.analysis.job.merge.merged", boom)
    findings = analyze_job(split_job([two_ranks(LEAKY, LEAKY)]))
    assert len([f for f in findings if f.code == "cow-growth"]) == 2
    assert [f.evidence["where"] for f in findings if f.code == "probe-degraded"] == ["merge_rank_findings"]


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    return run_dir


def _outputs(run_dir: Path) -> tuple[dict, str]:
    text = io.StringIO()
    write_outputs(run_dir, Console(file=text, width=120, color_system=None))
    return json.loads((run_dir / "report.json").read_text()), text.getvalue()


def test_a_page_that_cannot_be_written_leaves_report_json_and_the_summary(tmp_path, monkeypatch):
    monkeypatch.setattr("dlprobe.render.html.write_html", boom)
    monkeypatch.setattr("dlprobe.render.plot.plot_memory", lambda data, path: path)
    run_dir = _run_dir(tmp_path)
    report, text = _outputs(run_dir)
    assert not (run_dir / "report.html").exists()
    assert report["output_problems"] == [
        {"output": "report.html", "problem": "could not write report.html: TypeError: planted failure"}
    ]
    assert "warning: could not write report.html: TypeError: planted failure" in text
    assert "cow-growth" in text and {f["code"] for f in report["findings"]} >= {"cow-growth", "input-bound"}


def test_a_plot_and_a_summary_that_raise_are_named_and_the_files_still_written(tmp_path, monkeypatch):
    monkeypatch.setattr("dlprobe.render.plot.plot_memory", boom)
    monkeypatch.setattr("dlprobe.commands.outputs.run_summary", boom)
    run_dir = _run_dir(tmp_path)
    report, text = _outputs(run_dir)
    assert [p["output"] for p in report["output_problems"]] == ["memory.png", "the terminal summary"]
    assert report["output_problems"][0]["problem"].startswith("could not write memory.png: TypeError: planted failure")
    assert (run_dir / "report.html").exists()
    assert f"dlprobe: {len(report['findings'])} finding(s); the full report is in {run_dir}" in text
    assert "warning: could not write the terminal summary: TypeError: planted failure" in text


def test_a_check_rule_that_raises_is_a_failed_row_saying_so(monkeypatch):
    monkeypatch.setattr("dlprobe.check.rules._hang_rule", boom)
    config = config_from_mapping({"max_worker_uss": "1 GiB", "hang_timeout": "30s", "fail_on": []}, "test")
    rows = {r.rule: r for r in evaluate(config, make_report(worker_uss=((10 * MiB, 20 * MiB),)))}
    assert rows["max_worker_uss"].status == "pass" and rows["script_exit"].status == "pass"
    hang = rows["hang_timeout"]
    assert (hang.status, hang.observed) == ("fail", "not evaluated")
    assert hang.message.startswith("dlprobe's rule raised TypeError: planted failure (at ")


def test_fakes_still_build_runs_without_read_problems():
    assert fakes.run([], []).read_problems == []


def test_a_reader_that_raises_still_gives_a_report_saying_so(tmp_path, monkeypatch):
    monkeypatch.setattr("dlprobe.analysis.report.build.load_run", boom)
    run_dir = _run_dir(tmp_path)
    _, report = report_for(run_dir)
    [problem] = report["read_problems"]
    assert problem["problem"].startswith("load_run raised TypeError: planted failure (at ")
    assert [f["code"] for f in report["findings"]] == ["probe-degraded"]


def test_a_report_json_that_cannot_be_written_is_one_error_line(tmp_path, monkeypatch):
    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("dlprobe.commands.outputs.write_json", full)
    with pytest.raises(DlprobeError, match="cannot write .*report.json: No space left on device") as caught:
        _outputs(_run_dir(tmp_path))
    assert "dlprobe report" in caught.value.hint
