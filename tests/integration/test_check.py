"""`dlprobe check` on real loaders: one config gates the leaky and the clean dataset; baselines, JUnit, limits."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest

from tests.conftest import SCRIPTS, run_dlprobe

GATE = """\
max_batches = 400
max_worker_uss_growth = "64 MiB"
fail_on = ["cow-growth", "no-loader"]
"""


def check(tmp_path: Path, script: str, *args: str, options: list[str] = (), name: str = "run"):  # type: ignore[assignment]
    run_dir = tmp_path / name
    proc = run_dlprobe(["check", "--quiet", "--out", str(run_dir), *options, str(SCRIPTS / script), *args], tmp_path)
    verdict = json.loads((run_dir / "check.json").read_text()) if (run_dir / "check.json").exists() else None
    return proc, run_dir, verdict


def by_rule(verdict: dict) -> dict[str, dict]:
    return {r["rule"]: r for r in verdict["rules"]}


def junit_cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    return {case.get("name"): case for case in root.iter("testcase")}


def gone(pids: list[int]) -> bool:
    """True once none of the pids is a live process (zombies of other parents do not count)."""
    deadline = time.time() + 5
    while time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def clean_baseline(tmp_path_factory):
    """The clean numpy dataset, checked with the gate, writing a baseline from its report."""
    tmp_path = tmp_path_factory.mktemp("clean")
    (tmp_path / "gate.toml").write_text(GATE)
    baseline = tmp_path / "baseline.json"
    options = ["--config", str(tmp_path / "gate.toml"), "--baseline", str(baseline), "--update-baseline",
               "--junit", str(tmp_path / "junit.xml")]  # fmt: skip
    proc, run_dir, verdict = check(tmp_path, "numpy_dataset.py", options=options)
    return tmp_path, proc, run_dir, verdict, baseline


def test_clean_loader_passes_the_gate_and_writes_the_baseline(clean_baseline):
    tmp_path, proc, run_dir, verdict, baseline = clean_baseline
    assert proc.returncode == 0, proc.stderr
    assert verdict["passed"] and verdict["stop"]["reason"] == "max_batches"
    rules = by_rule(verdict)
    assert rules["max_worker_uss_growth"]["status"] == "pass"
    assert rules["fail_on cow-growth"]["status"] == "pass"
    assert "check PASSED" in proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["loaders"][0]["batches"] == 400  # stopped cleanly at the limit, not one batch more
    assert "checksum" not in proc.stdout  # the loop really ended there
    assert json.loads(baseline.read_text()) == report
    cases = junit_cases(tmp_path / "junit.xml")
    assert list(cases) == [r["rule"] for r in verdict["rules"]]
    assert not any(case.find("failure") is not None for case in cases.values())


def test_leaky_loader_fails_the_same_gate_and_regresses_against_the_baseline(clean_baseline, tmp_path):
    base_dir, *_, baseline = clean_baseline
    junit = tmp_path / "junit.xml"
    options = ["--config", str(base_dir / "gate.toml"), "--baseline", str(baseline), "--junit", str(junit)]
    proc, run_dir, verdict = check(tmp_path, "leaky_list_dataset.py", options=options)
    assert proc.returncode == 1, proc.stderr
    rules = by_rule(verdict)
    assert rules["max_worker_uss_growth"]["status"] == "fail"
    assert rules["fail_on cow-growth"]["status"] == "fail"
    assert rules["baseline worker_uss_growth"]["status"] == "fail"
    assert rules["script_exit"]["status"] == "pass"
    assert "max_worker_uss_growth: per-worker USS growth was" in proc.stderr
    assert "check FAILED" in proc.stderr
    cases = junit_cases(junit)
    assert list(cases) == list(rules)  # one testcase per rule
    failure = cases["max_worker_uss_growth"].find("failure")
    assert failure is not None and failure.get("message") == rules["max_worker_uss_growth"]["message"]
    report = json.loads((run_dir / "report.json").read_text())
    assert gone([w["pid"] for w in report["loaders"][0]["workers"]] + [report["processes"][0]["pid"]])
    # the failure explains itself, in the terminal and in the JUnit text: the finding, its suspect, the machine's load
    growth = rules["baseline worker_uss_growth"]
    assert growth["message"].startswith("worker_uss_growth (worker_steady_growth, one-time steps apart) regressed")
    assert "spreads above the baseline" in growth["message"] and "rule: fail above baseline" in growth["message"]
    assert growth["explanation"].startswith("explained by cow-growth: ") and "self.records" in growth["explanation"]
    assert "the machine was " in growth["explanation"]
    assert f"why: {growth['explanation']}" in cases["baseline worker_uss_growth"].find("failure").text
    assert "  why: explained by cow-growth" in proc.stderr and "Baseline rule: fail above baseline" in proc.stderr


def test_a_healthy_loader_passes_against_its_own_baseline_with_its_steps_apart(clean_baseline, tmp_path):
    # the wait share and first batch are the runner's load as much as the loader's: off, as ci-strict.toml has them
    base_dir, *_, baseline = clean_baseline
    config = tmp_path / "gate.toml"
    config.write_text(GATE + '[baseline_margins]\nfirst_batch_wait = "off"\nwait_fraction = "off"\n')
    proc, run_dir, verdict = check(tmp_path, "numpy_dataset.py", options=["--config", str(config), "--baseline",
                                                                         str(baseline)])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rules = by_rule(verdict)
    for metric in ("worker_uss_growth", "worker_uss_peak", "total_pss"):
        assert rules[f"baseline {metric}"]["status"] == "pass", rules[f"baseline {metric}"]
    assert "spreads of" in rules["baseline worker_uss_growth"]["threshold"]  # the baseline's own noise
    assert verdict["baseline_rule"].startswith("fail above baseline + max(margin, 4 spreads, noise floor)")
    report = json.loads((run_dir / "report.json").read_text())
    growths = [p["growth"] for p in report["processes"] if p["role"] == "worker"]
    # compared without its one-time steps where a worker had one (its first full collection's copy). On a busy
    # machine a worker can hold the parent's pages alone before its first reading (the parent wrote them first, as
    # a clean-clone CI run showed: 45 MiB at the first reading, flat after), and then it has no step to set apart.
    stepped = any(g["steps"] for g in growths)
    assert ("steps apart" if stepped else "(no step)") in rules["baseline worker_uss_growth"]["observed"], growths
    assert len(growths) == 2 and all(g["steady_bytes"] <= g["growth_bytes"] for g in growths)
    assert report["system"]["shm_job_peak"] is not None


def test_the_first_run_of_the_recipe_says_the_one_command_that_makes_its_baseline(tmp_path):
    config = tmp_path / "dlprobe.toml"
    config.write_text((Path(__file__).parents[2] / "sample_configs" / "ci-strict.toml").read_text())
    proc = run_dlprobe(["check", "--config", "dlprobe.toml", str(SCRIPTS / "no_loader.py"), "--epochs", "1"], tmp_path)
    assert proc.returncode == 2
    first, hint = proc.stderr.splitlines()[:2]
    assert first.startswith("error: baseline dlprobe-baseline.json: no such file"), proc.stderr
    command = f"dlprobe check --config dlprobe.toml --update-baseline {SCRIPTS / 'no_loader.py'} --epochs 1"
    assert f"`{command}`" in hint, hint


def test_script_failure_gets_its_own_exit_code(tmp_path):
    junit = tmp_path / "j.xml"
    proc, _, verdict = check(tmp_path, "fails_after_batches.py", "raise", options=["--junit", str(junit)])
    assert proc.returncode == 3
    assert "ValueError: bad learning rate" in proc.stderr  # the script's own stderr still comes through
    assert by_rule(verdict)["script_exit"]["status"] == "fail"
    assert junit_cases(junit)["script_exit"].find("failure") is not None
    assert "check SCRIPT FAILED" in proc.stderr


def test_hang_timeout_stops_a_hung_loader_and_fails(tmp_path):
    proc, run_dir, verdict = check(tmp_path, "faulty_worker.py", "hang", options=["--hang-timeout", "2s"])
    assert proc.returncode == 1, proc.stderr
    assert verdict["stop"]["reason"] == "hang" and verdict["stop"]["stall_s"] >= 2
    rule = by_rule(verdict)["hang_timeout"]
    assert rule["status"] == "fail"
    # The message is the hang record's measurement, not the configured timeout echoed back.
    record = json.loads((run_dir / "hangs" / "hang-1.json").read_text())
    assert verdict["stop"]["stall_s"] == record["waited_s"]
    worker = record["loop"]["awaited_worker"]
    assert worker is not None and verdict["stop"]["worker_id"] == worker
    match = re.fullmatch(r"loader 0 \(waiting on worker (\d+)\) delivered no batch for ([\d.]+)s \(limit 2s\); "
                         r"dlprobe stopped the script", rule["message"])  # fmt: skip
    assert match, rule["message"]
    assert int(match[1]) == worker and float(match[2]) >= 2
    assert rule["observed"] == f"no batch for {match[2]}s"
    assert by_rule(verdict)["script_exit"]["status"] == "pass"
    report = json.loads((run_dir / "report.json").read_text())
    assert gone([p["pid"] for p in report["processes"]])


def test_max_seconds_ends_an_endless_run_without_failing_it(tmp_path):
    proc, run_dir, verdict = check(tmp_path, "endless_loader.py", options=["--max-seconds", "6s"])
    assert proc.returncode == 0, proc.stderr
    assert verdict["stop"]["reason"] == "max_seconds" and verdict["stop"]["signals"] == []
    report = json.loads((run_dir / "report.json").read_text())
    assert report["exit_code"] == 0  # stopped by the hooks at a batch boundary, not by a signal
    assert by_rule(verdict)["script_exit"]["status"] == "pass"


BAD_INPUT = [
    ("malformed.toml", 'max_seconds = "90s\n', [], "malformed.toml: not valid TOML"),
    ("unknown.toml", 'max_worker_us = "1 GB"\n', [], "unknown.toml: key 'max_worker_us': unknown key"),
    ("unitless.toml", "max_total_pss = 200\n", [], "unitless.toml: key 'max_total_pss': 200 has no unit"),
    ("negative.toml", 'max_shm_peak = "-1 GB"\n', [], "negative.toml: key 'max_shm_peak': '-1 GB' is negative"),
    ("ok.toml", "", ["--baseline", "missing.json"], "baseline missing.json: no such file"),
    ("ok.toml", "", ["--baseline", "old.json"], "baseline old.json: key 'schema_version' is 0, expected 4"),
    ("ok.toml", "", ["--max-seconds", "10"], "--max-seconds: key 'max_seconds': '10' has no unit"),
    (None, '[tool.dlprobe]\nhang_timeout = "soon"\n', [], "pyproject.toml [tool.dlprobe]: key 'hang_timeout'"),
]


@pytest.mark.parametrize(("name", "text", "options", "message"), BAD_INPUT, ids=[b[3][:40] for b in BAD_INPUT])
def test_bad_input_is_one_error_line_with_a_hint_and_exit_2(tmp_path, name, text, options, message):
    (tmp_path / "old.json").write_text(json.dumps({"schema_version": 0, "findings": []}))
    if name is None:
        (tmp_path / "pyproject.toml").write_text(text)
        config = []
    else:
        (tmp_path / name).write_text(text)
        config = ["--config", name]
    proc = run_dlprobe(["check", *config, *options, str(SCRIPTS / "no_loader.py")], tmp_path)
    assert proc.returncode == 2
    first, *rest = proc.stderr.splitlines()
    assert first.startswith("error: ") and message in first, proc.stderr
    assert rest and rest[0].startswith("hint: ")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "dlprobe-runs").exists()  # refused before the script ran


def test_a_loop_left_with_break_is_not_a_hang(tmp_path):
    proc, _, verdict = check(tmp_path, "break_then_pause.py", "4", options=["--hang-timeout", "2s"])
    assert proc.returncode == 0, proc.stderr
    assert verdict["stop"] is None and by_rule(verdict)["hang_timeout"]["status"] == "pass"
    assert proc.stdout == "saved\n"


def test_the_strict_ci_recipe_passes_a_healthy_script_whose_dataset_takes_seconds_to_build(tmp_path):
    # sample_configs/ci-strict.toml fails on any warning; a 2.5 s dataset build, paid once per job, is a note
    # (slow-start info), not a warning that fails CI, on a quiet machine or a busy one. Its first step: the
    # baseline is written only when the check passes.
    config = tmp_path / "ci-strict.toml"
    config.write_text((Path(__file__).parents[2] / "sample_configs" / "ci-strict.toml").read_text())
    proc, run_dir, verdict = check(
        tmp_path, "slow_build_healthy.py", options=["--config", str(config), "--update-baseline"]
    )
    report = json.loads((run_dir / "report.json").read_text())
    loud = [(f["code"], f["severity"], f["title"]) for f in report["findings"] if f["severity"] != "info"]
    assert proc.returncode == 0, (loud, proc.stderr[-2000:])
    assert verdict["passed"] and (tmp_path / "dlprobe-baseline.json").exists()
    [slow] = [f for f in report["findings"] if f["code"] == "slow-start"]
    # the script sleeps 2.5 s; the phase is timed between marks dlprobe takes, rounded to the ms (2.499 s once)
    assert slow["severity"] == "info" and slow["evidence"]["phases"]["before_loader_s"] >= 2.45
