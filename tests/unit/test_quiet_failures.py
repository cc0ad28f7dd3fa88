"""Quiet where the evidence is thin: no throughput advice and no unplaced slow-start from a run that ended in an
error, one finding per failure (the script's error folded into the worker's), titles cut at a word."""

from __future__ import annotations

from dlprobe.analysis import analyze, fold_script_errors
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.script import find_run_problems
from dlprobe.analysis.findings.startup import find_slow_start
from dlprobe.analysis.findings.throughput import find_input_bound, find_too_many_workers
from tests.unit.fakes import loader, run
from tests.unit.test_advice_analysis import _epoch
from tests.unit.test_failure_findings import CAUGHT, _dead_run, _error
from tests.unit.test_startup_findings import MAIN, MODULE, _slow_run

SCRIPT_ERROR = {"ev": "script_error", "t": 106.0, "type": "ValueError", "file": "/home/u/train.py", "line": 42,
                "message": CAUGHT}  # fmt: skip


def _starved(*events):
    data = run([loader(num_workers=0, epochs=[_epoch([0.04] * 30, 0.01)])], [], events=list(events))
    data.meta["machine"]["usable_cores"] = 4
    return data


def test_no_throughput_advice_from_a_run_that_ended_in_an_error():
    assert find_input_bound(_starved())  # the loop starved for 1.5 s: advice
    assert find_input_bound(_starved(SCRIPT_ERROR)) == []
    assert find_too_many_workers(_starved(SCRIPT_ERROR)) == []


def test_no_throughput_advice_from_under_a_second_of_steady_time():
    short = run([loader(num_workers=0, epochs=[_epoch([0.04] * 15, 0.01)])], [])  # 0.75 s
    short.meta["machine"]["usable_cores"] = 4
    assert find_input_bound(short) == []


def test_start_up_time_nothing_places_is_no_finding_in_a_crash_run():
    unplaced = _slow_run(5.0, [])
    assert find_slow_start(unplaced)  # a run that ends well gets it, as a note
    unplaced.events.append(SCRIPT_ERROR)
    assert find_slow_start(unplaced) == []
    placed = _slow_run(2.0, [{"seconds": 1.0, "frames": [MODULE, MAIN]}])
    placed.events.append(SCRIPT_ERROR)
    [finding] = find_slow_start(placed)  # where the time went is known: still said
    assert "not known" not in finding.title


def test_the_scripts_error_is_folded_into_the_workers_finding_with_the_line_it_stopped_at():
    data = _dead_run({**_error(CAUGHT), "type": "ValueError"})
    data.events += [{"ev": "sample_check", "loader": 0, "index": 13, "outcome": "fails"}, SCRIPT_ERROR]
    codes = [f.code for f in analyze(data)]
    assert "script-error" not in codes and codes.count("bad-sample") == 1
    [bad] = [f for f in analyze(data) if f.code == "bad-sample"]
    assert bad.evidence["script_stopped_at"] == "train.py:42" and "(train.py:42)" in bad.detail


def test_a_script_error_of_another_exception_or_worker_stays():
    worker = Finding("bad-sample", "error", "t", "d", "f", {"exception": "ValueError", "worker_id": 1})
    other = Finding("script-error", "error", "t", "d", "f", {"message": CAUGHT})  # worker 0, not 1
    assert fold_script_errors([worker, other]) == [worker, other]
    mine = Finding("script-error", "error", "t", "d", "f", {"message": CAUGHT.replace("process 0", "process 1")})
    assert fold_script_errors([worker, mine]) == [worker]


def test_a_long_script_error_title_is_cut_at_a_word_never_in_a_path():
    message = "No such file: /data/" + "/".join(f"part{i:03d}" for i in range(60)) + " while loading"
    data = run([], [], events=[{"ev": "script_error", "type": "FileNotFoundError", "message": message}])
    [finding] = [f for f in find_run_problems(data) if f.code == "script-error"]
    assert finding.title == "The script raised FileNotFoundError: No such file ..."  # the path whole, or not at all
