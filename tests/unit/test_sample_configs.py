"""Every file in sample_configs/ loads, and means what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlprobe.check.config import DEFAULT_FAIL_ON, KEYS, CheckConfig, load_config
from dlprobe.check.limits import Stop
from dlprobe.check.rules import evaluate
from tests.unit.check_reports import MB, MiB, finding, make_report

SAMPLES = Path(__file__).resolve().parents[2] / "sample_configs"
SETTING = re.compile(r"^# ((?:[a-z_]+ = .*)|\[baseline_margins\])$")


def load(name: str, tmp_path: Path) -> CheckConfig:
    return load_config(str(SAMPLES / name), {}, cwd=tmp_path)


def verdicts(config: CheckConfig, report: dict, **kw) -> dict[str, str]:
    return {r.rule: r.status for r in evaluate(config, report, **kw)}


def test_the_four_samples_are_there():
    assert {p.name for p in SAMPLES.glob("*.toml")} >= {"default.toml", "ci-strict.toml", "leak-hunt.toml",
                                                         "hang-hunt.toml"}  # fmt: skip


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_sample_loads(path, tmp_path):
    config = load_config(str(path), {}, cwd=tmp_path)
    assert isinstance(config, CheckConfig)


def test_default_documents_every_key_with_the_real_defaults(tmp_path):
    text = (SAMPLES / "default.toml").read_text()
    assert load("default.toml", tmp_path) == CheckConfig()  # all commented out: the defaults
    uncommented = "\n".join(m.group(1) if (m := SETTING.match(line)) else line for line in text.splitlines())
    full = tmp_path / "full.toml"
    full.write_text(uncommented)
    config = load_config(str(full), {}, cwd=tmp_path)
    assert set(config.sources) == set(KEYS)  # every key is there, with a valid example value
    assert config.fail_on == list(DEFAULT_FAIL_ON)  # "The default is the list below."
    assert config.baseline_margin == CheckConfig().baseline_margin  # 'Default "10%".'
    assert config.max_worker_uss_growth == 200 * MB


def test_ci_strict_is_strict(tmp_path):
    config = load("ci-strict.toml", tmp_path)
    assert (config.max_batches, config.max_seconds, config.hang_timeout) == (300, 300.0, 120.0)
    assert config.max_worker_uss_growth == 100 * MB
    # "A healthy 4-worker image loader keeps ... 45 MiB of them" in the job's own /dev/shm: it fits
    assert 45 * MiB < config.max_shm_peak
    assert config.baseline == str(SAMPLES / "dlprobe-baseline.json")  # next to the config
    # "Fail on any warning or error finding, not only the listed codes."
    assert verdicts(config, make_report(findings=[finding("input-bound")]))["fail_on_severity warning"] == "fail"
    assert verdicts(config, make_report(findings=[finding("hint", "info")]))["fail_on_severity warning"] == "pass"
    # "allowing 10% worse; the wait share and the first batch's wait are not compared": the runner's load moves them
    base = make_report(first_batch_s=1.0, wait_fraction=0.10, worker_uss=((0, 50 * MB),))
    busy = verdicts(config, make_report(first_batch_s=6.3, wait_fraction=0.7, worker_uss=((0, 50 * MB),)),
                    baseline=base)  # fmt: skip
    assert config.max_wait_fraction is None
    assert busy["baseline wait_fraction"] == busy["baseline first_batch_wait"] == "skip"
    assert busy["baseline worker_uss_growth"] == "pass" and busy["max_first_batch_wait"] == "pass"
    grown = verdicts(config, make_report(worker_uss=((0, 60 * MB),)), baseline=base)
    assert grown["baseline worker_uss_growth"] == "fail"
    assert verdicts(config, make_report(worker_uss=((0, 101 * MB),)))["max_worker_uss_growth"] == "fail"


def test_leak_hunt_gates_on_memory_only(tmp_path):
    config = load("leak-hunt.toml", tmp_path)
    leaky = make_report(worker_uss=((10 * MiB, 10 * MiB + 65 * MB),), findings=[finding("cow-growth")])
    assert verdicts(config, leaky)["max_worker_uss_growth"] == "fail"
    assert verdicts(config, leaky)["fail_on cow-growth"] == "fail"
    slow = verdicts(config, make_report(wait_fraction=0.95, findings=[finding("shm-pressure")]))
    assert "fail" not in slow.values()  # "slow loading is not what this run is about"


def test_hang_hunt_fails_on_a_hang_and_dead_workers(tmp_path):
    config = load("hang-hunt.toml", tmp_path)
    assert config.hang_timeout == 60.0 and config.max_seconds == 900.0
    hung = verdicts(config, make_report(), stop=Stop("hang", 0.0, 61.0, 0))
    assert hung["hang_timeout"] == "fail" and hung["script_exit"] == "pass"
    assert (
        verdicts(config, make_report(findings=[finding("worker-killed", "error")]))["fail_on worker-killed"] == "fail"
    )
    assert verdicts(config, make_report(first_batch_s=130.0))["max_first_batch_wait"] == "fail"
    # copy-on-write growth, what kills workers most often, fails it before the kill
    assert verdicts(config, make_report(findings=[finding("cow-growth")]))["fail_on cow-growth"] == "fail"
