"""The check's config: human units, precedence (file < command line), pyproject, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlprobe.check.config import DEFAULT_FAIL_ON, CheckConfig, config_from_mapping, load_config
from dlprobe.errors import DlprobeError

MB = 1000 * 1000


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_units_are_parsed_and_sources_recorded(tmp_path):
    text = 'max_worker_uss_growth = "200 MB"\nmax_seconds = "2m"\nmax_wait_fraction = "40%"\nmax_batches = 50\n'
    cfg_file = write(tmp_path / "c.toml", text + 'fail_on = ["cow-growth", "input-bound"]\n')
    config = load_config(str(cfg_file), {}, cwd=tmp_path)
    assert config.max_worker_uss_growth == 200 * MB
    assert config.max_seconds == 120.0
    assert config.max_wait_fraction == pytest.approx(0.4)
    assert config.max_batches == 50
    assert config.fail_on == ["cow-growth", "input-bound"]  # a code no analyzer here knows is still accepted
    assert config.sources["max_seconds"] == str(cfg_file)
    assert config.raw["max_worker_uss_growth"] == "200 MB"


def test_command_line_overrides_the_file(tmp_path):
    cfg_file = write(tmp_path / "c.toml", 'max_worker_uss_growth = "200 MB"\nmax_batches = 50\n')
    config = load_config(str(cfg_file), {"max_batches": "7", "max_worker_uss_growth": "1 GiB"}, cwd=tmp_path)
    assert config.max_batches == 7 and config.sources["max_batches"] == "--max-batches"
    assert config.max_worker_uss_growth == 1024**3


def test_pyproject_table_is_used_without_config(tmp_path):
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n[tool.dlprobe]\nhang_timeout = "90s"\n'
          'baseline = "ci/base.json"\n')  # fmt: skip
    sub = tmp_path / "src"
    sub.mkdir()
    config = load_config(None, {}, cwd=sub)
    assert config.hang_timeout == 90.0
    assert config.sources["hang_timeout"].endswith("pyproject.toml [tool.dlprobe]")
    assert config.baseline == str(tmp_path / "ci" / "base.json")  # relative to the file, not the cwd


def test_no_file_gives_defaults(tmp_path):
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    config = load_config(None, {}, cwd=tmp_path)
    assert config == CheckConfig()
    assert config.fail_on == list(DEFAULT_FAIL_ON) and config.baseline_margin == pytest.approx(0.10)


def test_per_metric_margins(tmp_path):
    cfg_file = write(tmp_path / "c.toml", '[baseline_margins]\nworker_uss_growth = "64 MB"\nwait_fraction = "25%"\n')
    config = load_config(str(cfg_file), {}, cwd=tmp_path)
    assert config.baseline_margins == {"worker_uss_growth": ("absolute", 64 * MB), "wait_fraction": ("relative", 0.25)}


BAD = [
    ("max_worker_uss_growth = 200", "key 'max_worker_uss_growth'", "has no unit"),
    ('max_worker_uss_growth = "200"', "key 'max_worker_uss_growth'", "has no unit"),
    ('hang_timeout = "90"', "key 'hang_timeout'", "has no unit"),
    ('max_worker_uss = "-5 MB"', "key 'max_worker_uss'", "is negative"),
    ('max_seconds = "soon"', "key 'max_seconds'", "not a duration"),
    ("max_batches = 0", "key 'max_batches'", "whole number above 0"),
    ("max_wait_fraction = 1.5", "key 'max_wait_fraction'", "out of range"),
    ('max_worker_usss = "1 GB"', "key 'max_worker_usss'", "did you mean 'max_worker_uss'"),
    ('fail_on = ["Cow Growth"]', "key 'fail_on'", "not a finding code"),
    ('fail_on_severity = "fatal"', "key 'fail_on_severity'", "not a severity"),
    ('baseline_margin = "-10%"', "key 'baseline_margin'", "negative"),
    ('[baseline_margins]\nspeed = "10%"', "key 'baseline_margins'", "unknown metric 'speed'"),
    ('max_seconds = "90s', "", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "key", "problem"), BAD)
def test_bad_values_name_the_file_the_key_and_what_is_expected(tmp_path, text, key, problem):
    cfg_file = write(tmp_path / "bad.toml", text + "\n")
    with pytest.raises(DlprobeError) as info:
        load_config(str(cfg_file), {}, cwd=tmp_path)
    error = info.value
    assert error.exit_code == 2
    assert error.message.startswith(f"{cfg_file}: {key}")
    assert problem in error.message
    assert error.hint


def test_bad_command_line_value_names_the_option(tmp_path):
    with pytest.raises(DlprobeError, match=r"^--max-shm-peak: key 'max_shm_peak': '10' has no unit"):
        load_config(None, {"max_shm_peak": "10"}, cwd=tmp_path)


def test_missing_config_file(tmp_path):
    with pytest.raises(DlprobeError, match="no such config file"):
        load_config(str(tmp_path / "nope.toml"), {}, cwd=tmp_path)


def test_mapping_config_for_the_api():
    config = config_from_mapping({"max_worker_uss_growth": "100 MB", "fail_on": []}, "marker")
    assert config.max_worker_uss_growth == 100 * MB and config.fail_on == []
