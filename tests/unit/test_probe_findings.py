"""probe-degraded: the probe's own failures (probe_error events) and a probe that wrote nothing."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dlprobe.analysis import analyze
from dlprobe.analysis.findings.probe import find_probe_degraded
from dlprobe.analysis.report.build import build_report, probe_cost_line
from dlprobe.analysis.run.stackfile import StackProfile, load_stacks
from dlprobe.in_training import event_log, probe_errors
from dlprobe.rundir.files import read_jsonl
from dlprobe.rundir.handle import RunDir
from dlprobe.supervisor.stack_recorder import StackRecorder
from dlprobe.system.pyspy import find_py_spy
from tests.unit import fakes


def _error(pid: int, count: int, where: str = "inflight.worker") -> dict[str, Any]:
    return {
        "ev": "probe_error",
        "t": 101.0,
        "pid": pid,
        "where": where,
        "type": "OSError",
        "message": "[Errno 28] No space left on device",
        "consequence": "hang reports for worker 2 lack the indices",
        "count": count,
    }


def test_probe_errors_become_one_finding_per_place_with_counts_summed_over_processes():
    events = [{"ev": "start", "t": 100.0, "pid": 1}, _error(7, 1), _error(7, 10), _error(8, 1)]
    [finding] = find_probe_degraded(fakes.run([], [], events=events))
    assert finding.code == "probe-degraded" and finding.severity == "info"
    assert finding.evidence["count"] == 11 and sorted(finding.evidence["pids"]) == [7, 8]
    assert "OSError" in finding.title and "No space left" in finding.detail
    assert "lack the indices" in finding.detail and "(11 times)" in finding.detail


def test_a_clean_run_has_no_probe_finding():
    assert find_probe_degraded(fakes.run([], [], events=[{"ev": "start", "t": 100.0, "pid": 1}])) == []


def test_a_probe_that_wrote_nothing_is_degraded_not_no_loader():
    run = fakes.run([], [], events=[])
    run.meta["target_pid"] = 1234  # a `dlprobe run` target, whose probe always writes "start"
    codes = [f.code for f in analyze(run)]
    assert codes == ["probe-degraded"], codes
    run.events.append({"ev": "start", "t": 100.0, "pid": 1234})
    assert [f.code for f in analyze(run)] == ["no-loader"]


def test_failures_are_rate_limited_and_flushed_with_the_final_count(tmp_path, monkeypatch):
    monkeypatch.setenv(event_log.RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(event_log, "_log", None)
    monkeypatch.setattr(event_log, "open_error", None)
    probe_errors._forget_in_child()
    for _ in range(1234):
        probe_errors.record("hooks.dupes", ValueError("odd batch"), "repeats are not counted")
    probe_errors.flush()
    probe_errors.flush()  # nothing new: no new event
    counts = [e["count"] for e in read_jsonl(RunDir(tmp_path).events) if e["ev"] == "probe_error"]
    assert counts == [1, 10, 100, 1000, 1234]
    probe_errors._forget_in_child()


def test_lost_event_lines_are_told_once_writing_works_again(tmp_path):
    log = event_log.EventLog(str(tmp_path))
    good_fd = log._fd
    log._fd = os.open(os.devnull, os.O_RDONLY)  # writes fail like on a full disk
    log.emit("batches", waits=[0.1])
    log.emit("batches", waits=[0.2])
    os.close(log._fd)
    log._fd = good_fd
    log.emit("epoch_end")
    events = list(read_jsonl(RunDir(tmp_path).events))
    assert [e["ev"] for e in events] == ["epoch_end", "probe_error"]
    assert events[1]["where"] == "event_log.write" and events[1]["count"] == 2


ATTACH_ERROR = "Error: Failed to attach: Operation not permitted (os error 1)"
STARTED = [{"ev": "start", "t": 100.0, "pid": 1}]


def test_a_failed_hotspot_sampler_is_said_with_py_spys_message_and_what_is_missing():
    run = fakes.run([], [], events=STARTED)
    run.stacks = StackProfile(rate=10, error=ATTACH_ERROR, status="failed")
    [finding] = find_probe_degraded(run)
    assert finding.severity == "info" and ATTACH_ERROR in finding.title
    assert "hotspot sampler" in finding.detail and "worker-hotspots" in finding.detail
    assert finding.evidence["missing"] == ["worker-hotspots"] and finding.evidence["error"] == ATTACH_ERROR
    assert "SYS_PTRACE" in finding.fix  # the message says ptrace was refused
    run.stacks = StackProfile(rate=10, error="Error: Python 3.99 is not supported", status="failed")
    [other] = find_probe_degraded(run)
    assert "SYS_PTRACE" not in other.fix and "3.99" in other.detail
    run.stacks = StackProfile(rate=10, error="py-spy not found (pip install py-spy, ...)", status="missing")
    [missing] = find_probe_degraded(run)
    assert "pip install py-spy" in missing.fix


def test_a_sampler_that_worked_never_ran_or_was_turned_off_is_not_a_gap():
    run = fakes.run([], [], events=STARTED)
    assert find_probe_degraded(run) == []  # no stacks.json: the loop never starved, nothing was due
    for status, error in [("ok", None), ("off", "stack sampling turned off (DLPROBE_STACK_RATE=0)")]:
        run.stacks = StackProfile(rate=10, error=error, status=status)
        assert find_probe_degraded(run) == [], status


def test_the_recorder_saves_py_spys_error_in_stacks_json(tmp_path, monkeypatch):
    refusing = tmp_path / "py-spy"  # a real subprocess standing in for a py-spy the kernel refuses
    refusing.write_text(f'#!/bin/sh\necho "{ATTACH_ERROR}" >&2\nexit 1\n')
    refusing.chmod(0o755)
    monkeypatch.setenv("DLPROBE_PY_SPY", str(refusing))
    monkeypatch.delenv("DLPROBE_STACK_RATE", raising=False)
    recorder = StackRecorder(os.getpid(), tmp_path)
    recorder.start()
    recorder.stop()
    profile = load_stacks(tmp_path)
    assert profile is not None and profile.status == "failed" and profile.error == ATTACH_ERROR.removeprefix("Error: ")


# py-spy 0.4's stderr, as `py-spy record --pid N --subprocesses` printed it with RUST_BACKTRACE=1 for a process that
# had already ended (its message first, then the Rust backtrace whose last line the title used to quote).
ENDED_STDERR = """Error: No python processes found in process 20334 or any of its subprocesses

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg
   1: py_spy::sampler::Sampler::new
   2: py_spy::run_spy_command
   3: py_spy::main
   4: std::sys::backtrace::__rust_begin_short_backtrace
   5: std::rt::lang_start::{{closure}}
   6: std::rt::lang_start_internal
   7: main
"""


def _recorder_with_py_spy(tmp_path, monkeypatch, stderr: str):
    fake = tmp_path / "py-spy"  # a real subprocess printing what the real py-spy printed
    (tmp_path / "stderr.txt").write_text(stderr)
    fake.write_text(f'#!/bin/sh\ncat "{tmp_path / "stderr.txt"}" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("DLPROBE_PY_SPY", str(fake))
    monkeypatch.delenv("DLPROBE_STACK_RATE", raising=False)
    recorder = StackRecorder(os.getpid(), tmp_path)
    recorder.start()
    recorder.stop()
    profile = load_stacks(tmp_path)
    assert profile is not None
    return profile


def test_a_script_that_ended_before_py_spy_attached_is_not_a_sampler_failure(tmp_path, monkeypatch):
    profile = _recorder_with_py_spy(tmp_path, monkeypatch, ENDED_STDERR)
    assert profile.status == "ended"
    assert profile.error == "No python processes found in process 20334 or any of its subprocesses"
    run = fakes.run([], [], events=STARTED)
    run.stacks = profile
    assert find_probe_degraded(run) == []


def test_a_py_spy_failure_is_titled_with_its_message_not_its_backtrace(tmp_path, monkeypatch):
    stderr = ENDED_STDERR.replace("No python processes found in process 20334 or any of its subprocesses",
                                  "Failed to find python version from target process")  # fmt: skip
    profile = _recorder_with_py_spy(tmp_path, monkeypatch, stderr)
    run = fakes.run([], [], events=STARTED)
    run.stacks = profile
    [finding] = find_probe_degraded(run)
    assert profile.status == "failed"
    assert finding.title == "Hotspot sampling failed: Failed to find python version from target process"


def test_the_supervisors_cpu_budget_is_a_line_of_the_report_never_a_finding():
    # The cap binds on any busy machine while workers' memory moves (the demo's leak); a finding that says
    # "nothing to do" on every such run is noise, so the cost is reported beside the run, not as a finding.
    run = fakes.run([], [])
    run.result["supervisor"] = {"cpu_budget": 0.03, "cpu_share": 0.05, "over_budget_s": 12.0, "deep_reads_skipped": 40}
    assert find_probe_degraded(run) == []
    line = probe_cost_line(build_report(run, []))
    assert line == (
        "dlprobe's own cost: 5.0% of one core (cap 3%); 40 memory readings of moving processes deferred "
        "over 12 s (every process still read at least every 5 s)"
    )
    run.result["supervisor"] = {"cpu_budget": 0.03, "cpu_share": 0.012, "over_budget_s": 0.0, "deep_reads_skipped": 0}
    assert probe_cost_line(build_report(run, [])) == "dlprobe's own cost: 1.2% of one core (cap 3%)"
    # A run shorter than the cap's window: the share is mostly start-up, and a reading deferred for a moment
    # has no "over 0 s".
    run.result["supervisor"] = {
        **{"cpu_budget": 0.03, "cpu_share": 0.04, "over_budget_s": 0.2, "deep_reads_skipped": 1},
        **{"wall_s": 3.2, "cpu_window_s": 10.0},
    }
    assert probe_cost_line(build_report(run, [])) == (
        "dlprobe's own cost: 4.0% of one core over 3 s (cap 3% of any 10 s), most of it starting up; "
        "1 memory reading of moving processes deferred (every process still read at least every 5 s)"
    )
    # Under a second, or not recorded: never "over 0 s".
    run.result["supervisor"] = {"cpu_budget": 0.03, "cpu_share": 0.038, "wall_s": 0.4}
    assert probe_cost_line(build_report(run, [])) == "dlprobe's own cost: 3.8% of one core over 0.4 s (cap 3%)"
    for wall in (0.01, 0.0, None):
        run.result["supervisor"]["wall_s"] = wall
        assert probe_cost_line(build_report(run, [])) == "dlprobe's own cost: 3.8% of one core (cap 3%)"
    del run.result["supervisor"]
    assert probe_cost_line(build_report(run, [])) is None


def test_the_real_py_spy_on_a_script_that_has_ended_leaves_no_finding(tmp_path, monkeypatch):
    from tests.conftest import dead_pid

    exe = find_py_spy()
    if exe is None:
        pytest.skip("py-spy is not installed")
    monkeypatch.setenv("RUST_BACKTRACE", "1")  # the backtrace whose last line the title used to quote
    monkeypatch.delenv("DLPROBE_STACK_RATE", raising=False)
    recorder = StackRecorder(dead_pid(), tmp_path)
    recorder.start()
    recorder.stop()
    profile = load_stacks(tmp_path)
    assert profile is not None and profile.status == "ended", profile
    # py-spy's own words for a process it could not find (sampled one pid at a time: "Failed to get process
    # executable name"); the recorder tells "ended" from "failed" by the process being gone
    assert profile.error is not None and "process" in profile.error
    run = fakes.run([], [], events=STARTED)
    run.stacks = profile
    assert find_probe_degraded(run) == []
