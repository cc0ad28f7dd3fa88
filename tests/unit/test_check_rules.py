"""Rules on synthetic reports: thresholds, finding codes, baselines, exit codes, the table and JUnit XML."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from dlprobe.check.baseline import load_baseline
from dlprobe.check.config import config_from_mapping
from dlprobe.check.limits import Stop
from dlprobe.check.rules import evaluate
from dlprobe.commands.check import exit_code_for
from dlprobe.errors import DlprobeError
from dlprobe.render.check_table import check_summary
from dlprobe.render.junit import junit_xml
from tests.unit.check_reports import MB, MiB, finding, make_report


def rules(limits, report, **kw):
    return {r.rule: r for r in evaluate(config_from_mapping(limits, "test"), report, **kw)}


def test_threshold_rules_pass_fail_and_skip():
    report = make_report(worker_uss=((10 * MiB, 150 * MiB), (10 * MiB, 40 * MiB)), shm_peak=None)
    out = rules({"max_worker_uss_growth": "100 MiB", "max_worker_uss": "1 GB", "max_shm_peak": "1 GB",
                 "fail_on": []}, report)  # fmt: skip
    growth = out["max_worker_uss_growth"]
    assert (growth.status, growth.observed, growth.threshold) == ("fail", "140.0 MiB", "<= 100 MiB")
    assert growth.message == "per-worker USS growth was 140.0 MiB, above the limit 100 MiB"
    assert out["max_worker_uss"].status == "pass"
    assert out["max_shm_peak"].status == "skip"  # nothing measured is not a pass and not a failure


def test_decimal_limits_are_shown_in_binary_units_too():
    out = rules({"max_total_pss": "200 MB", "fail_on": []}, make_report(pss_total=300 * MiB))
    assert out["max_total_pss"].message == "peak PSS of the whole job was 300.0 MiB, above the limit 200 MB (190.7 MiB)"


def test_wait_rules_and_hang():
    report = make_report(wait_fraction=0.5, first_batch_s=12.0, max_wait_s=12.0)
    out = rules({"max_wait_fraction": "40%", "max_first_batch_wait": "10s", "hang_timeout": "60s", "fail_on": []},
                report)  # fmt: skip
    assert out["max_wait_fraction"].status == "fail" and out["max_wait_fraction"].observed == "50.0%"
    assert out["max_first_batch_wait"].status == "fail"
    assert out["hang_timeout"].status == "pass"
    stopped = rules({"hang_timeout": "60s", "fail_on": []}, report, stop=Stop("hang", 0.0, 61.5, 0))
    assert stopped["hang_timeout"].status == "fail"
    assert stopped["hang_timeout"].observed == "no batch for 61.50s"
    message = stopped["hang_timeout"].message
    assert message == "loader 0 delivered no batch for 61.50s (limit 60s); dlprobe stopped the script"
    on_worker = rules({"hang_timeout": "60s", "fail_on": []}, report, stop=Stop("hang", 0.0, 61.5, 2, worker_id=1))
    assert on_worker["hang_timeout"].message.startswith("loader 2 (waiting on worker 1) delivered no batch for 61.50s")
    unmeasured = rules({"hang_timeout": "60s", "fail_on": []}, report, stop=Stop("hang", 0.0))
    gap = unmeasured["hang_timeout"]
    assert gap.status == "fail" and gap.observed == "no batch for over 60s"
    assert "None" not in gap.message and "not measured" in gap.message
    assert stopped["script_exit"].status == "pass"  # dlprobe stopped it; the script did not fail


@pytest.mark.parametrize("code", ["cow-growth", "worker-hang", "input-bound", "made-up-later"])
def test_fail_on_works_with_any_code(code):
    report = make_report(findings=[finding(code, title="the title")])
    out = rules({"fail_on": [code, "other-code"]}, report)
    assert out[f"fail_on {code}"].status == "fail"
    assert out[f"fail_on {code}"].message == "the title"
    assert out["fail_on other-code"].status == "pass"


def test_the_default_codes_fail_a_job_whose_rank_ran_short_of_batches():
    # The job exits 0 when the short rank only idles, so nothing else in the check would catch it.
    report = make_report(findings=[finding("uneven-ranks", "error", "Rank 1 read no batch")])
    out = {r.rule: r for r in evaluate(config_from_mapping({}, "test"), report)}
    assert out["fail_on uneven-ranks"].status == "fail"


def test_fail_on_severity_counts_worse_findings_too():
    report = make_report(findings=[finding("x-error", "error"), finding("y-info", "info")])
    assert rules({"fail_on": [], "fail_on_severity": "warning"}, report)["fail_on_severity warning"].status == "fail"
    report = make_report(findings=[finding("y-info", "info")])
    assert rules({"fail_on": [], "fail_on_severity": "warning"}, report)["fail_on_severity warning"].status == "pass"


def test_baseline_within_margin_passes_and_regression_fails():
    base = make_report(worker_uss=((10 * MiB, 110 * MiB),), wait_fraction=0.20)
    within = make_report(worker_uss=((10 * MiB, 119 * MiB),), wait_fraction=0.21)  # +9%, +5%
    worse = make_report(worker_uss=((10 * MiB, 125 * MiB),), wait_fraction=0.21)  # +15%
    ok = rules({"fail_on": []}, within, baseline=base, baseline_path="base.json")
    assert ok["baseline worker_uss_growth"].status == "pass"
    assert ok["baseline worker_uss_growth"].threshold == "<= 110.0 MiB (100.0 MiB + 10%)"
    bad = rules({"fail_on": []}, worse, baseline=base, baseline_path="base.json")
    assert bad["baseline worker_uss_growth"].status == "fail"
    assert "regressed: 115.0 MiB against 100.0 MiB in base.json" in bad["baseline worker_uss_growth"].message
    assert bad["baseline wait_fraction"].status == "pass"
    # the same regression allowed by a wider per-metric margin, relative or absolute
    wide = rules({"fail_on": [], "baseline_margins": {"worker_uss_growth": "20%"}}, worse, baseline=base)
    assert wide["baseline worker_uss_growth"].status == "pass"
    absolute = rules({"fail_on": [], "baseline_margins": {"worker_uss_growth": "10 MiB"}}, worse, baseline=base)
    assert absolute["baseline worker_uss_growth"].status == "fail"
    assert absolute["baseline worker_uss_growth"].threshold == "<= 110.0 MiB (100.0 MiB + 10.0 MiB)"


def test_baseline_margin_never_goes_below_the_noise_floor():
    base = make_report(first_batch_s=0.2)
    out = rules({"fail_on": []}, make_report(first_batch_s=0.4), baseline=base)
    assert out["baseline first_batch_wait"].status == "pass"  # 10% of 0.2 s would be measuring noise
    assert out["baseline first_batch_wait"].threshold == "<= 0.45s (0.20s + 0.25s noise floor)"
    assert rules({"fail_on": []}, make_report(first_batch_s=0.5), baseline=base)[
        "baseline first_batch_wait"
    ].status == ("fail")


def test_baseline_metric_missing_on_one_side_is_skipped():
    out = rules({"fail_on": []}, make_report(shm_peak=5 * MB), baseline=make_report(shm_peak=None))
    assert out["baseline shm_peak"].status == "skip"


def test_exit_codes():
    ok = evaluate(config_from_mapping({"fail_on": []}, "t"), make_report())
    assert exit_code_for(ok, make_report(), None) == 0
    leaky = make_report(findings=[finding("cow-growth")])
    assert exit_code_for(evaluate(config_from_mapping({}, "t"), leaky), leaky, None) == 1
    crashed = make_report(exit_code=1, findings=[finding("script-error", "error", "The script raised ValueError")])
    rows = evaluate(config_from_mapping({}, "t"), crashed)
    assert exit_code_for(rows, crashed, None) == 3
    assert rows[0].rule == "script_exit" and rows[0].message == "The script raised ValueError"
    stopped = make_report(exit_code=130)
    stop = Stop("max_seconds", 0.0)
    assert exit_code_for(evaluate(config_from_mapping({}, "t"), stopped, stop), stopped, stop) == 0


def test_baseline_file_problems_are_usage_errors(tmp_path):
    missing = tmp_path / "none.json"
    with pytest.raises(DlprobeError, match=f"^baseline {missing}: no such file") as info:
        load_baseline(str(missing))
    assert "--update-baseline" in info.value.hint and info.value.exit_code == 2
    old = tmp_path / "old.json"
    old.write_text(json.dumps(make_report(schema_version=0)))
    with pytest.raises(DlprobeError, match=r"key 'schema_version' is 0, expected 4"):
        load_baseline(str(old))
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(DlprobeError, match="not valid JSON"):
        load_baseline(str(junk))
    other = tmp_path / "other.json"
    other.write_text('{"tool": "something else"}')
    with pytest.raises(DlprobeError, match="key 'schema_version' missing"):
        load_baseline(str(other))


def _sample_rows():
    report = make_report(worker_uss=((10 * MiB, 150 * MiB),), shm_peak=None,
                         findings=[finding("cow-growth", title="workers copied the dataset")])  # fmt: skip
    limits = {"max_worker_uss_growth": "100 MiB", "max_shm_peak": "1 GB", "fail_on": ["cow-growth", "shm-pressure"]}
    return evaluate(config_from_mapping(limits, "ci.toml"), report)


TABLE_WIDTH = 70
EXPECTED_TABLE = (
    "dlprobe check".ljust(TABLE_WIDTH)
    + """
┏━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┓
┃ rule                  ┃ threshold  ┃ observed             ┃ result ┃
┡━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━┩
│ script_exit           │ exit 0     │ exit 0 (100 batches) │ PASS   │
│ max_worker_uss_growth │ <= 100 MiB │ 140.0 MiB            │ FAIL   │
│ max_shm_peak          │ <= 1 GB    │ -                    │ SKIP   │
│ fail_on cow-growth    │ absent     │ present (warning)    │ FAIL   │
│ fail_on shm-pressure  │ absent     │ absent               │ PASS   │
└───────────────────────┴────────────┴──────────────────────┴────────┘
max_worker_uss_growth: per-worker USS growth was 140.0 MiB, above the limit 100 MiB  [ci.toml]
  why: explained by cow-growth: workers copied the dataset
fail_on cow-growth: workers copied the dataset  [ci.toml]
check FAILED: 2 of 4 rules passed, 1 skipped (nothing measured)
Verdict saved in runs/x/check.json
"""
)


def test_terminal_table_exact_text():
    console = Console(file=io.StringIO(), width=100, color_system=None, legacy_windows=False)
    console.print(check_summary(_sample_rows(), 1, "runs/x"))
    assert console.file.getvalue() == EXPECTED_TABLE  # type: ignore[attr-defined]


def test_junit_has_one_testcase_per_rule():
    rows = _sample_rows()
    root = ET.fromstring(junit_xml(rows, "dlprobe.check.train", 4.0, {"script": "train.py"}))
    [suite] = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [r.rule for r in rows]
    assert suite.get("tests") == "5" and suite.get("failures") == "2" and suite.get("skipped") == "1"
    failures = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failures) == {"max_worker_uss_growth", "fail_on cow-growth"}
    assert failures["max_worker_uss_growth"].get("message") == rows[1].message


def test_a_metric_the_config_turns_off_is_not_compared_and_the_summary_says_so_not_unmeasured():
    from dlprobe.render.check_table import verdict

    config = config_from_mapping({"baseline_margins": {"wait_fraction": "off"}}, "ci.toml")
    rows = evaluate(config, make_report(wait_fraction=0.9), baseline=make_report(wait_fraction=0.1),
                    baseline_path="base.json")  # fmt: skip
    [row] = [r for r in rows if r.rule == "baseline wait_fraction"]
    assert row.status == "skip" and '"off" in [baseline_margins]' in row.message
    text = verdict(rows, 0).plain
    assert "1 not compared (off in the config)" in text and "nothing measured" not in text
