"""Before a sample is blamed, it is loaded again alone: real runs of `dlprobe run` on a handle the forked workers
share (h5py through a Python file object; a raw file read with seek()/read()), a sample that is really bad, and a
sampler that yields len(dataset). Only the bad sample is blamed; the sampler is named; nobody is told to skip or
catch anything that loads."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import DlprobeResult

WORKER_CODES = ("bad-sample", "worker-error", "sampler-out-of-range")
THROUGHPUT_ADVICE = ("input-bound", "too-many-workers", "loop-bound")


def _codes(result: DlprobeResult) -> list[str]:
    return [f["code"] for f in result.report["findings"]]


def _says_skip_or_catch(finding: dict[str, Any]) -> bool:
    text = finding["fix"].lower()
    return "return none" in text or "look at sample" in text or "drop nones" in text


def _one_failure_finding(result: DlprobeResult) -> dict[str, Any]:
    """One finding for the worker's exception: the script's error (the same exception, re-raised) is folded in."""
    found = [f for f in result.report["findings"] if f["code"] in (*WORKER_CODES, "script-error")]
    assert len(found) == 1, [(f["code"], f["title"]) for f in found]
    assert not any(code in _codes(result) for code in THROUGHPUT_ADVICE), _codes(result)  # a dying run: no advice
    return found[0]


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ("shared_h5_handle.py", "OSError: Can't synchronously read data"),
        ("shared_file_offset.py", "is corrupt"),
        ("leaks_open_files.py", "OSError: [Errno 24] Too many open files"),
    ],
)
def test_an_error_from_a_handle_the_workers_share_is_not_blamed_on_the_sample(probe, tmp_path, script, error):
    result = probe(script, str(tmp_path), options=["--quiet"])
    assert result.returncode == 1 and error in result.stderr, result.stderr[-2000:]
    finding = _one_failure_finding(result)
    ev = finding["evidence"]
    assert finding["code"] == "worker-error", finding["title"]
    assert ev["sample_alone"] == "loads", ev  # dataset[index] loaded again alone, in a forked child
    assert f"on index {ev['index']}, which loads alone: not the sample" in finding["title"]
    if "Errno 24" in error:  # the descriptors ran out: what to close, not a shared handle
        assert "ran out of file descriptors" in finding["detail"] and "Close what __getitem__ opens" in finding["fix"]
    else:
        assert "opened in __init__" in finding["detail"] and "worker_init_fn" in finding["fix"]
    assert not _says_skip_or_catch(finding) and "Do not skip" in finding["fix"]
    assert ev["raised_in"].startswith("__getitem__ (") and ev["script_stopped_at"].startswith(script)


def test_a_sample_that_fails_alone_is_blamed_and_only_it(probe):
    result = probe("raises_through_loader.py", "worker", "4", options=["--quiet"])
    assert result.returncode == 1 and "ValueError: corrupt record 5" in result.stderr
    finding = _one_failure_finding(result)
    ev = finding["evidence"]
    assert finding["code"] == "bad-sample" and ev["index"] == 5 and ev["sample_alone"] == "fails", ev
    assert ev["control_index"] == 4 and ev["control_loads"] is True  # its neighbour in the batch loads
    assert finding["title"].startswith("Sample index 5 raises ValueError: corrupt record 5")
    assert "dataset[5] fails too" in finding["detail"]


def test_an_index_the_sampler_made_up_names_the_sampler_not_the_dataset(probe):
    result = probe("sampler_past_end.py", options=["--quiet"])
    assert result.returncode == 1 and "IndexError: list index out of range" in result.stderr
    finding = _one_failure_finding(result)
    ev = finding["evidence"]
    assert finding["code"] == "sampler-out-of-range", finding["title"]
    assert (ev["index"], ev["dataset_len"], ev["sampler"]) == (40, 40, "OneTooFar")
    assert finding["title"] == "The sampler OneTooFar yielded index 40, outside the dataset's 40 samples (loader 0)"
    assert "len(dataset) itself" in finding["detail"] and "Do not catch" in finding["fix"]
    assert not _says_skip_or_catch(finding)
