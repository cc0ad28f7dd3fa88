"""A worker's exception on one index: blamed on the sample only when it failed alone (the training process's
`sample_check`), on the sampler when the index is outside the dataset, and on nothing when it was not checked."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.findings.deaths.worker_deaths import find_worker_deaths
from tests.unit.test_failure_findings import CAUGHT, _dead_run, _error, slot

OSERROR = CAUGHT.replace("ValueError", "OSError").replace(
    "OSError: corrupt record at index 13",
    "OSError: Can't synchronously read data (filter returned failure; "
    "/very/long/path/to/the/shards/shard-00017-of-00100.h5 at offset 123456789)",
)


def _check(outcome: str, **fields: Any) -> dict[str, Any]:
    return {"ev": "sample_check", "loader": 0, "epoch": 0, "worker_id": 0, "exception": "OSError", "index": 13,
            "length": 4000, "outcome": outcome, **fields}  # fmt: skip


def _finding(*events: dict[str, Any], message: str = OSERROR, length: int | None = 4000, index: int = 13):
    run = _dead_run({**_error(message), "type": "OSError"})
    run.loaders[0].config["dataset"] = {"len": length}
    run.loaders[0].config["sampler"] = "__main__.OneTooFar" if length else None
    run.inflight = {11: slot(11, 0, "getitem", [12, index], index)}
    run.events.extend(events)
    [finding] = find_worker_deaths(run)
    return finding


def _advises_skipping(finding) -> bool:
    text = (finding.fix + finding.detail).lower()
    return "return none" in text or "catch the error in __getitem__, return" in text or "look at sample" in text


def test_an_index_that_loads_alone_is_not_the_sample():
    finding = _finding(_check("loads", control_index=None))
    assert finding.code == "worker-error" and finding.evidence["sample_alone"] == "loads"
    assert "loads alone: not the sample" in finding.title and "Sample index" not in finding.title
    assert "opened in __init__" in finding.detail and "worker_init_fn" in finding.fix
    assert not _advises_skipping(finding) and "Do not skip" in finding.fix


def test_an_index_that_fails_like_the_control_index_is_not_the_sample():
    finding = _finding(_check("fails-any", control_index=12, error_alone="OSError: x", control_error="OSError: x"))
    assert finding.code == "worker-error" and finding.evidence["sample_alone"] == "fails-any"
    assert "index 12 too" in finding.title and not _advises_skipping(finding)


def test_an_index_that_fails_alone_while_its_neighbour_loads_is_the_sample():
    finding = _finding(_check("fails", control_index=12, control_loads=True, error_alone="OSError: bad"))
    assert finding.code == "bad-sample" and finding.title.startswith("Sample index 13 raises OSError")
    assert "index 12, loaded just before it, loads" in finding.detail


def test_no_check_blames_nothing_and_says_why():
    finding = _finding(_check("unverified", reason="workers [1] were still loading after 5 s"))
    assert finding.code == "worker-error" and finding.evidence["sample_alone"] == "unverified"
    assert "was not checked" in finding.title and "still loading" in finding.detail
    assert not _advises_skipping(finding)
    finding = _finding()  # a run that recorded no check at all
    assert finding.code == "worker-error" and finding.evidence["sample_check_reason"] == "no check was recorded"


def test_the_same_error_at_other_indices_is_evidence_against_the_sample():
    other = _check("unverified", index=2710, reason="x")
    finding = _finding(_check("unverified", reason="x"), other)
    assert finding.evidence["failed_indices"] == [13, 2710] and "2 different indices" in finding.detail


def test_a_long_error_is_cut_at_a_word_in_the_title():
    finding = _finding(_check("loads"))
    assert "shard-00017-of-00100.h5" not in finding.title or finding.title.count("/") > 5
    assert " ..." in finding.title and not finding.title.split(" ...")[0].endswith("/")


def test_an_index_past_the_end_is_the_samplers_and_no_catch_advice():
    message = CAUGHT.replace("ValueError", "IndexError").replace(
        "IndexError: corrupt record at index 13", "IndexError: list index out of range"
    )
    finding = _finding(message=message, length=40, index=40)
    ev = finding.evidence
    assert finding.code == "sampler-out-of-range" and (ev["index"], ev["dataset_len"]) == (40, 40)
    assert ev["sampler"] == "__main__.OneTooFar" and "OneTooFar" in finding.title
    assert "len(dataset) itself" in finding.detail and "Do not catch" in finding.fix
    assert "return None" not in finding.fix
    negative = _finding(message=message, length=40, index=-1)
    assert negative.code == "sampler-out-of-range"


def test_an_index_inside_the_dataset_is_not_the_samplers():
    finding = _finding(_check("fails", control_index=12, control_loads=True), length=4000, index=13)
    assert finding.code == "bad-sample"


def test_a_check_the_probe_did_not_make_says_why():
    threads = _check("unverified", index=None, reason="the workers are threads of the training process: ...")
    finding = _finding(threads)
    assert finding.code == "worker-error" and "threads of the training process" in finding.detail
