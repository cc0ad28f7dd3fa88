"""The check's configuration: keys, their human units, and where they come from (file, pyproject, options)."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dlprobe.analysis.evidence.finding import SEVERITIES
from dlprobe.errors import DlprobeError
from dlprobe.units import parse_bytes, parse_duration

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib; tomli is the same parser, installed only there
    import tomli as tomllib

PYPROJECT = "pyproject.toml"
# uneven-ranks: a rank short of batches idles or hangs the job at its next collective, and the job exits 0 when it
# does not; node-oversubscribed and rank-duplicates are left out: small CI boxes and every-rank evaluation loaders.
DEFAULT_FAIL_ON = ("cow-growth", "shm-pressure", "worker-hang", "worker-killed", "no-loader", "uneven-ranks")
# Metrics a baseline compares; each rule key names the metric it limits.
BASELINE_METRICS = ("worker_uss_growth", "worker_uss_peak", "total_pss", "shm_peak", "wait_fraction",
                    "first_batch_wait")  # fmt: skip
CODE_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]*")


@dataclass
class CheckConfig:
    """Every setting of a check; None means the rule is off (a rule is checked only when it is set)."""

    max_batches: int | None = None
    max_seconds: float | None = None
    max_worker_uss_growth: int | None = None
    max_worker_uss: int | None = None
    max_total_pss: int | None = None
    max_shm_peak: int | None = None
    max_wait_fraction: float | None = None
    max_first_batch_wait: float | None = None
    hang_timeout: float | None = None
    fail_on: list[str] = field(default_factory=lambda: list(DEFAULT_FAIL_ON))
    fail_on_severity: str | None = None
    baseline: str | None = None
    baseline_margin: float = 0.10
    baseline_margins: dict[str, tuple[str, float]] = field(default_factory=dict)
    # where each value came from, for messages ("ci.toml", "--max-batches", "pyproject.toml [tool.dlprobe]")
    sources: dict[str, str] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # each value as the user wrote it ("200 MB"), for display


class ConfigError(DlprobeError):
    """A bad setting: names the file (or option), the key and what is expected; exit 2."""

    def __init__(self, source: str, key: str, problem: str, hint: str) -> None:
        where = f"{source}: key '{key}'" if key else source
        super().__init__(f"{where}: {problem}", hint=hint)


def _unit_text(value: Any, what: str, example: str) -> str:
    """The text of a size or duration; a bare number or a negative amount is refused with what to write."""
    if isinstance(value, bool) or not isinstance(value, str) or re.fullmatch(r"\s*[0-9]*\.?[0-9]+\s*", value):
        raise ValueError(f"{value!r} has no unit; expected {what} with a unit, like {example}")
    if value.strip().startswith("-"):
        raise ValueError(f"{value!r} is negative; expected {what} of zero or more, like {example}")
    return value


def parse_size(value: Any) -> int:
    text = _unit_text(value, "a size", '"200 MB"')
    try:
        return parse_bytes(text)
    except ValueError:
        raise ValueError(
            f'{value!r} is not a size; expected a number with a unit, like "200 MB" or "1.5 GiB"'
        ) from None


def parse_seconds(value: Any) -> float:
    text = _unit_text(value, "a duration", '"90s"')
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(
            f'{value!r} is not a duration; expected a number with a unit, like "90s", "2m" or "500ms"'
        ) from None


def _share(value: Any) -> float:
    """ "40%" -> 0.4; a plain number is already a share."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:  # noqa: S110 - not a number: the ValueError below says what is expected
            pass
    raise ValueError(f'{value!r} is not a share; expected a percentage like "40%" or a number like 0.4')


def parse_fraction(value: Any) -> float:
    """0.4 or "40%": a share between 0 and 1."""
    share = _share(value)
    if not 0 <= share <= 1:
        raise ValueError(f'{value!r} is out of range; expected a share from 0 to 1 (0.4) or a percentage ("40%")')
    return share


def parse_positive_int(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{value!r} is not a count; expected a whole number above 0, like 200")
    return value


def parse_codes(value: Any) -> list[str]:
    """Finding codes; any code string is accepted, so findings added later can be gated too."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(c, str) for c in items):
        raise ValueError(f'{value!r} is not a list of finding codes; expected e.g. ["cow-growth", "shm-pressure"]')
    codes = [c.strip() for c in items]
    bad = [c for c in codes if not CODE_PATTERN.fullmatch(c)]
    if bad:
        raise ValueError(
            f"{bad[0]!r} is not a finding code; codes are lower-case words joined by '-', like \"cow-growth\""
        )
    return list(dict.fromkeys(codes))


def parse_severity(value: Any) -> str:
    if value not in SEVERITIES:
        raise ValueError(f"{value!r} is not a severity; expected one of {', '.join(SEVERITIES)}")
    return str(value)


def parse_path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f'{value!r} is not a path; expected a file name like "dlprobe-baseline.json"')
    return value


def parse_margin(value: Any) -> float:
    """A relative margin: "10%" (or the share 0.1), zero or more."""
    if isinstance(value, str) and not value.strip().endswith("%"):
        raise ValueError(f'{value!r} is not a percentage; expected e.g. "10%"')
    share = _share(value)
    if share < 0:
        raise ValueError(f'{value!r} is negative; expected a margin of 0% or more, like "10%"')
    return share


# How each metric's absolute margin is written: sizes, durations or shares.
METRIC_UNITS: dict[str, Callable[[Any], float]] = {
    "worker_uss_growth": parse_size,
    "worker_uss_peak": parse_size,
    "total_pss": parse_size,
    "shm_peak": parse_size,
    "wait_fraction": parse_fraction,
    "first_batch_wait": parse_seconds,
}


def parse_margins(value: Any) -> dict[str, tuple[str, float]]:
    """Per-metric margins: "25%" (relative), an amount in the metric's unit ("64 MB", "2s", 0.05), or "off"."""
    if not isinstance(value, dict):
        raise ValueError(f'{value!r} is not a table; expected e.g. {{ worker_uss_growth = "64 MB" }}')
    out: dict[str, tuple[str, float]] = {}
    for metric, margin in value.items():
        if metric not in METRIC_UNITS:
            raise ValueError(f"unknown metric {metric!r}{_did_you_mean(metric, METRIC_UNITS)}; "
                             f"expected one of {', '.join(BASELINE_METRICS)}")  # fmt: skip
        if isinstance(margin, str) and margin.strip().lower() == "off":
            out[metric] = ("off", 0.0)  # not compared: a metric the runner's load moves more than any margin
        elif isinstance(margin, str) and margin.strip().endswith("%"):
            out[metric] = ("relative", parse_margin(margin))
        else:
            try:
                out[metric] = ("absolute", float(METRIC_UNITS[metric](margin)))
            except ValueError as exc:
                raise ValueError(f'{metric}: {exc} (or a percentage like "25%", or "off")') from None
    return out


PARSERS: dict[str, Callable[[Any], Any]] = {
    "max_batches": parse_positive_int,
    "max_seconds": parse_seconds,
    "max_worker_uss_growth": parse_size,
    "max_worker_uss": parse_size,
    "max_total_pss": parse_size,
    "max_shm_peak": parse_size,
    "max_wait_fraction": parse_fraction,
    "max_first_batch_wait": parse_seconds,
    "hang_timeout": parse_seconds,
    "fail_on": parse_codes,
    "fail_on_severity": parse_severity,
    "baseline": parse_path,
    "baseline_margin": parse_margin,
    "baseline_margins": parse_margins,
}
KEYS = tuple(PARSERS)
assert set(KEYS) == {f.name for f in fields(CheckConfig)} - {"sources", "raw"}


def _did_you_mean(key: str, choices: Any) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def apply(config: CheckConfig, values: dict[str, Any], source: str, base_dir: Path | None = None) -> CheckConfig:
    """Validate and set values from one source; later sources override earlier ones.

    A path in a config file is relative to that file's folder (so CI can run from anywhere); one given on
    the command line is relative to the current directory.
    """
    for key, raw in values.items():
        if key not in PARSERS:
            raise ConfigError(
                source, key, f"unknown key{_did_you_mean(key, PARSERS)}",
                hint="the keys are: " + ", ".join(KEYS) + " (see sample_configs/default.toml)",
            )  # fmt: skip
        try:
            value = PARSERS[key](raw)
        except ValueError as exc:
            raise ConfigError(source, key, str(exc), hint="sizes look like \"200 MB\", durations like \"90s\"; "
                              "see sample_configs/default.toml for every key") from None  # fmt: skip
        if key == "baseline" and base_dir is not None:
            value = str(base_dir / value)
        setattr(config, key, value)
        config.sources[key] = source
        config.raw[key] = raw if isinstance(raw, str) else str(raw)
    return config


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(str(path), "", "no such config file", hint="pass --config with an existing TOML file, "
                          "e.g. a copy of sample_configs/default.toml") from None  # fmt: skip
    except IsADirectoryError:
        raise ConfigError(str(path), "", "is a directory, not a TOML file", hint="pass --config FILE.toml") from None
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}", hint="check the file's permissions") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "", f"not valid TOML: {exc}", hint="fix the syntax; strings need quotes, "
                          "e.g. max_worker_uss_growth = \"200 MB\"") from None  # fmt: skip


def load_file(path: str | Path) -> dict[str, Any]:
    """The settings of a config file: a plain TOML file, or the [tool.dlprobe] table of a pyproject.toml."""
    path = Path(path)
    data = read_toml(path)
    if path.name == PYPROJECT and "tool" in data:
        table = (data.get("tool") or {}).get("dlprobe")
        if not isinstance(table, dict):
            raise ConfigError(str(path), "tool.dlprobe", "no [tool.dlprobe] table",
                              hint="add a [tool.dlprobe] table, or pass a plain TOML file")  # fmt: skip
        return table
    return data


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.dlprobe] table, looking upwards from start."""
    for folder in (start, *start.parents):
        candidate = folder / PYPROJECT
        if candidate.is_file():
            data = read_toml(candidate)
            if isinstance((data.get("tool") or {}).get("dlprobe"), dict):
                return candidate
            return None  # the project root without our table: stop here, do not climb out of the project
    return None


def source_name(path: Path) -> str:
    return f"{path} [tool.dlprobe]" if path.name == PYPROJECT else str(path)


def load_config(config_path: str | None, overrides: dict[str, Any], cwd: Path | None = None) -> CheckConfig:
    """Defaults, then the file (--config, else pyproject.toml's [tool.dlprobe]), then command-line options."""
    config = CheckConfig()
    path = Path(config_path) if config_path else find_pyproject(cwd or Path.cwd())
    if path is not None:
        apply(config, load_file(path), source_name(path), path.parent)
    for key, value in overrides.items():
        apply(config, {key: value}, "--" + key.replace("_", "-"))
    return config


def config_from_mapping(values: dict[str, Any], source: str) -> CheckConfig:
    """A config from keyword arguments (the Python API and the pytest marker)."""
    return apply(CheckConfig(), values, source)
