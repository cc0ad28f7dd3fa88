"""gc-copy on real forked workers: the copy at a worker's first full garbage collection is timed in the worker, set
apart from the growth `dlprobe check` compares, and advised away with gc.freeze() only where it happened."""

from __future__ import annotations

import json

from tests.conftest import SCRIPTS, run_dlprobe
from tests.integration.test_check import by_rule

FULL_COLLECTION = "full garbage collection"


def workers(report: dict) -> list[dict]:
    return [p for p in report["processes"] if p["role"] == "worker"]


def test_each_worker_s_first_full_collection_is_a_timed_one_time_copy(probe):
    result = probe("gc_copy_loader.py", "20")
    assert result.returncode == 0, result.stderr
    report = result.report
    [finding] = result.findings("gc-copy")
    evidence = finding["evidence"]
    assert finding["severity"] == "info" and evidence["start_method"] == "fork"
    assert {row["worker_id"] for row in evidence["gc_steps"]} == {0, 1}
    assert all(row["bytes"] >= 16 << 20 and row["collection_s"] is not None for row in evidence["gc_steps"])
    assert finding["fix"].startswith("Call gc.freeze() just before the loop starts the workers")
    for worker in workers(report):
        growth = worker["growth"]
        [step] = growth["steps"]
        assert step["cause"] == FULL_COLLECTION, growth
        assert growth["steady_bytes"] < 8 << 20 < growth["growth_bytes"], growth  # the copy is not growth
    assert json.loads((result.run_dir / "events.jsonl").read_text().splitlines()[0])  # a run dir like any other


def test_frozen_objects_are_not_copied_and_nothing_is_advised(probe):
    result = probe("gc_copy_loader.py", "20", "freeze")
    assert result.returncode == 0, result.stderr
    assert result.findings("gc-copy") == []
    for worker in workers(result.report):
        assert worker["growth"]["steps"] == [] and worker["growth"]["growth_bytes"] < 16 << 20, worker["growth"]


def test_the_gate_passes_a_loader_whose_only_rise_is_the_copy_against_a_baseline_without_it(tmp_path):
    # the baseline's workers collected late in the run, the new run's straight after their first batches: the steps
    # fall in different places among the readings; compared with the copy set apart, the two runs are the same
    gate = tmp_path / "gate.toml"
    gate.write_text('[baseline_margins]\nfirst_batch_wait = "off"\nwait_fraction = "off"\n')
    baseline = tmp_path / "baseline.json"
    script = str(SCRIPTS / "gc_copy_loader.py")
    options = ["--quiet", "--config", str(gate), "--baseline", str(baseline)]
    first = run_dlprobe(
        ["check", *options, "--out", str(tmp_path / "base"), "--update-baseline", script, "40"], tmp_path
    )
    assert first.returncode == 0, first.stderr
    proc = run_dlprobe(["check", *options, "--out", str(tmp_path / "run"), script, "5"], tmp_path)
    verdict = json.loads((tmp_path / "run" / "check.json").read_text())
    rules = by_rule(verdict)
    assert rules["baseline worker_uss_growth"]["status"] == "pass", rules["baseline worker_uss_growth"]
    assert FULL_COLLECTION in rules["baseline worker_uss_growth"]["observed"]
    assert proc.returncode == 0, proc.stderr
