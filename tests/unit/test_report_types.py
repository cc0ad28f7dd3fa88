"""mypy checks each read of the report: a key that report.json does not have, or a value of another type than its
schema's, is a type error in render/ and check/ (the same TypedDicts that generate report.schema.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

READS = """
from dlprobe.analysis.report.schema import Report


def reads(report: Report) -> None:
    report["exit_code"] + 1
    report["loaders"][0]["num_workers"] + 1
    report["no_such_key"]
    for finding in report["findings"]:
        finding["evidence"]["pids"].append("supervisor")
        finding["evidence"]["rank"] + 1
        finding["evidence"]["no_such_evidence"]
"""


def test_mypy_refuses_reads_the_schema_does_not_allow(tmp_path):
    path = tmp_path / "reads.py"
    path.write_text(READS)
    root = Path(__file__).resolve().parents[2]
    out, _, status = api.run([str(path), "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"),
                              "--config-file", str(root / "pyproject.toml")])  # fmt: skip
    errors = [line.split(": error: ", 1)[1] for line in out.splitlines() if ": error: " in line]
    assert status == 1
    assert errors == [
        'Unsupported operand types for + ("None" and "int")  [operator]',
        'Unsupported operand types for + ("None" and "int")  [operator]',
        'TypedDict "Report" has no key "no_such_key"  [typeddict-item]',
        'Argument 1 to "append" of "list" has incompatible type "str"; expected "int"  [arg-type]',
        'Unsupported operand types for + ("str" and "int")  [operator]',
        'TypedDict "Evidence" has no key "no_such_evidence"  [typeddict-item]',
    ], out
