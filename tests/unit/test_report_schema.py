"""report.json has a schema: the shipped JSON Schema is the one generated from analysis/report/schema.py, and the
reports dlprobe builds fit it (every report.json a test writes is checked too, by tests/conftest.py)."""

from __future__ import annotations

import json
import shutil

from dlprobe.analysis.report.build import report_for
from dlprobe.analysis.report.schema import SCHEMA_FILE, SCHEMA_VERSION, schema_text
from tests.damage import FIXTURES
from tests.schema_check import problems


def test_the_shipped_schema_is_the_generated_one():
    # After a change to report/schema.py: python -m dlprobe.analysis.report.schema
    assert SCHEMA_FILE.read_text() == schema_text()
    assert json.loads(SCHEMA_FILE.read_text())["$id"].endswith(f".v{SCHEMA_VERSION}.json")


def test_a_run_report_and_a_job_report_fit_the_schema(tmp_path):
    for source in ("leaky_list", "torchrun_rank_failed"):
        shutil.copytree(FIXTURES / source, tmp_path / source)
        _, report = report_for(tmp_path / source)
        assert report["schema_version"] == SCHEMA_VERSION
        assert problems(json.loads(json.dumps(report))) == []
    assert report["job"]["rank_count"] == 1 and [r["label"] for r in report["ranks"]] == ["rank 0"]


def test_a_report_of_the_wrong_shape_is_caught(tmp_path):
    shutil.copytree(FIXTURES / "leaky_list", tmp_path / "run")
    _, report = report_for(tmp_path / "run")
    report["loaders"][0]["num_workers"] = "two"
    del report["system"]["shm_peak"]
    report["processes"][0]["uss"]["peak"] = 1.5
    assert problems(json.loads(json.dumps(report))) == [
        "$.loaders[0].num_workers: str 'two' is not integer or null",
        "$.processes[0].uss.peak: float 1.5 is not integer or null",
        "$.system: no 'shm_peak'",
    ]


def test_each_codes_evidence_is_checked_by_its_code(tmp_path):
    shutil.copytree(FIXTURES / "leaky_list", tmp_path / "run")
    _, report = report_for(tmp_path / "run")
    finding = {"code": "worker-killed", "severity": "error", "title": "t", "detail": "d", "fix": "f", "loader_id": 0}
    report["findings"] = [
        {**finding, "evidence": {"pids": ["supervisor"], "cause": "oom"}},
        {**finding, "code": "rank-failed", "evidence": {"rank": 1}},  # a rank is a label in every finding
        {**finding, "code": "uneven-ranks", "evidence": {"pids": ["not read for this code"]}},
    ]
    assert problems(json.loads(json.dumps(report))) == [
        "$.findings[0].evidence.pids[0]: str 'supervisor' is not integer",
        "$.findings[1].evidence.rank: int 1 is not string",
    ]


def test_every_code_a_report_can_hold_has_its_evidence_type():
    from dlprobe.analysis import ANALYZER_CODES
    from dlprobe.analysis.evidence.schema import EVIDENCE_BY_CODE

    job_codes = {"node-oversubscribed", "uneven-ranks", "rank-duplicates", "rank-failed", "straggler-rank"}
    codes = {code for codes in ANALYZER_CODES.values() for code in codes} | job_codes
    assert sorted(codes) == sorted(EVIDENCE_BY_CODE)


def test_every_code_gives_each_key_the_one_meaning_evidence_gives_it():
    # `Evidence` gathers every code's keys (render/ and check/ read through it): a code left out of it could give a
    # key another meaning unseen (schema 3's batch-dropped `batches`, a list of numbers where it is a count elsewhere)
    import typing

    from dlprobe.analysis.evidence.schema import EVIDENCE_BY_CODE, Evidence

    union = typing.get_type_hints(Evidence)
    disagree = {
        code: [key for key, kind in typing.get_type_hints(record).items() if union.get(key) != kind]
        for code, record in EVIDENCE_BY_CODE.items()
    }
    assert {code: keys for code, keys in disagree.items() if keys} == {}


def test_a_key_no_evidence_type_names_is_caught():
    from tests.schema_check import undeclared_evidence

    finding = {"code": "gc-copy", "evidence": {"gc_steps": [], "total_bytes": 1}}
    assert undeclared_evidence({"findings": [finding]}) == []
    finding["evidence"]["workers"] = []  # schema 3's name
    assert undeclared_evidence({"findings": [finding]}) == ["$.findings[0] (gc-copy): workers"]
