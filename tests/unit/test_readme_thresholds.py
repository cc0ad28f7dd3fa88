"""The Thresholds table (docs/thresholds.md, linked from the README) names every constant it quotes, and each value is
the code's."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

THRESHOLDS = Path(__file__).resolve().parents[2] / "docs" / "thresholds.md"
# `module.NAME = value` in the table; module is a path under dlprobe/analysis/ unless it starts dlprobe/
_QUOTED = re.compile(r"`((?:dlprobe/)?[a-z_/]+)\.([A-Z][A-Z_]+) = ([^`]+)`")
_UNITS = {"MiB": 1024 * 1024, "KiB": 1024}


def _section() -> str:
    text = THRESHOLDS.read_text()
    start = text.index("# Thresholds")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _quoted() -> list[tuple[str, str, str]]:
    return _QUOTED.findall(_section())


def _value(text: str) -> float:
    number, _, unit = text.partition(" ")
    if text.endswith("%"):
        return float(text[:-1]) / 100
    return float(number) * _UNITS.get(unit, 1)  # seconds ("2.0 s") and plain counts have no factor


def test_the_table_quotes_constants():
    assert len(_quoted()) >= 30


@pytest.mark.parametrize(("module", "name", "written"), _quoted())
def test_each_quoted_threshold_is_the_codes(module, name, written):
    path = module.replace("/", ".") if module.startswith("dlprobe/") else "dlprobe.analysis." + module.replace("/", ".")
    actual = getattr(importlib.import_module(path), name)
    assert _value(written) == pytest.approx(actual), f"docs says {module}.{name} = {written}; the code has {actual}"


# Numbers in the findings' modules that decide no finding: sizes of what is shown, the trace's layout, timings of
# the probe's own watch.
NOT_THRESHOLDS = {
    "findings/hotspots.TOP_FUNCTIONS",
    "findings/hangs.MAX_STACK_LINES",
    "findings/attach.SAME_MOMENT_S",
    "findings/memory.SUSPECTS_FIXED",
    "measures/head_of_line.SLOW_SHOWN",
    "findings/dropped_batch.BATCHES_SHOWN",
}
_NUMBER = re.compile(r"^([A-Z][A-Z_]+)\s*(?::[^=]*)?=\s*-?[0-9]", re.M)


def test_every_number_a_finding_is_decided_by_is_in_the_table():
    quoted = {f"{module}.{name}" for module, name, _ in _quoted()}
    analysis = Path(importlib.import_module("dlprobe.analysis").__file__ or "").parent
    missing = []
    for path in sorted(analysis.glob("findings/**/*.py")) + [
        analysis / "measures" / "stack_causes.py",
        analysis / "measures" / "worker_cpu.py",
        analysis / "measures" / "head_of_line.py",
        analysis / "measures" / "fetch_stacks.py",
    ]:
        for name in _NUMBER.findall(path.read_text()):
            key = f"{path.relative_to(analysis).with_suffix('').as_posix()}.{name}"
            if key not in quoted and key not in NOT_THRESHOLDS:
                missing.append(key)
    assert missing == [], f"thresholds missing from docs/thresholds.md's table: {missing}"
