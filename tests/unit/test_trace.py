"""trace.json from synthetic runs: named tracks per rank and worker, slices, counters, instants, the size cap."""

from __future__ import annotations

import json
from pathlib import Path

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.report import trace as trace_module
from dlprobe.analysis.report.trace import build_trace
from dlprobe.render.trace_file import trace_problem, write_trace
from tests.perfetto import process_names, structure_problems
from tests.unit.fakes import MiB, job_run, rank_events, rank_processes


def worker_batches(pid: int, worker: int, rows: int, t0: float = 101.5) -> dict:
    return {"ev": "worker_batches", "t": t0 + rows * 0.01, "pid": pid, "loader": 0, "worker": worker, "t0": t0,
            "stride": 1, "rows": [[2 * i + worker, i * 0.01, 0.004, 0.001, 16 * i] for i in range(rows)]}  # fmt: skip


def single_run(rows: int = 5):
    events = rank_events(10, None, [11, 12], world_size=None)
    events += [worker_batches(11, 0, rows), worker_batches(12, 1, rows)]
    run = job_run(events, rank_processes(10, [11, 12], [100 * MiB, 120 * MiB, 140 * MiB]))
    run.meta["target_pid"] = 10
    run.processes = run.processes[1:]  # no launcher: `dlprobe run train.py`
    run.gone[12] = 107.0
    main = run.processes[0].series
    main.pss_anon, main.pss_file, main.pss_shmem = [MiB] * 3, [2 * MiB] * 3, [None, None, 3 * MiB]
    return run


def test_one_named_track_per_process_main_first_then_its_workers():
    trace = build_trace([single_run()], {"findings": []})
    assert structure_problems(trace) == []
    assert process_names(trace) == ["main (pid 10)", "loader 0 / worker 0 (pid 11)", "loader 0 / worker 1 (pid 12)",
                                    "system"]  # fmt: skip
    sort = [e["args"]["sort_index"] for e in trace["traceEvents"] if e["name"] == "process_sort_index"]
    assert sort == [1, 2, 3, 4]  # main first, its workers in order, the machine last


def test_waits_batches_counters_and_instants():
    run = single_run()
    finding = Finding("worker-killed", "error", "worker 1 was killed", "d", "f", {"pids": [12]}, 0)
    trace = build_trace([run], {"findings": [finding.to_dict()]})
    events = trace["traceEvents"]
    waits = [e for e in events if e.get("name") == "wait"]
    assert len(waits) == 10 and all(e["dur"] == 10_000 for e in waits)  # 0.01 s each, in microseconds
    assert [e["args"]["batch"] for e in waits] == list(range(10))
    batches = [e for e in events if e.get("name", "").startswith("batch ")]
    assert [e["name"] for e in batches if e["pid"] == 2] == [f"batch {2 * i}" for i in range(5)]
    assert batches[0]["dur"] == 5_000 and batches[0]["args"]["first_index"] == 0
    collates = [e for e in events if e.get("name") == "collate" and e["pid"] == 2]
    assert collates[0]["ts"] + collates[0]["dur"] == batches[0]["ts"] + batches[0]["dur"]  # nested, same end
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"USS / RSS (MiB)", "PSS by kind (MiB)"}
    pss = [e["args"] for e in events if e["name"] == "PSS by kind (MiB)"]
    assert pss == [{"anon": 1.0, "file": 2.0}, {"anon": 1.0, "file": 2.0}, {"anon": 1.0, "file": 2.0, "shmem": 3.0}]
    instants = {(e["pid"], e["name"]) for e in events if e["ph"] == "i"}
    assert (3, "worker exit") in instants and (3, "error: worker-killed") in instants
    [killed] = [e for e in events if e["name"] == "error: worker-killed"]
    assert killed["ts"] == (107.0 - 100.0) * 1e6  # at the time the worker was gone, not the end of the run


def test_ranks_are_named_by_rank_with_their_workers_under_them():
    events = rank_events(10, 0, [11, 12]) + rank_events(20, 1, [21, 22])
    procs = rank_processes(10, [11, 12], [100 * MiB] * 3) + rank_processes(20, [21, 22], [100 * MiB] * 3)
    trace = build_trace([job_run(events, procs)], {"findings": []})
    assert structure_problems(trace) == []
    assert process_names(trace) == [
        "rank 0 (pid 10)", "rank 0 / loader 0 / worker 0 (pid 11)", "rank 0 / loader 0 / worker 1 (pid 12)",
        "rank 1 (pid 20)", "rank 1 / loader 0 / worker 0 (pid 21)", "rank 1 / loader 0 / worker 1 (pid 22)", "system",
    ]  # fmt: skip


def test_a_stuck_fetch_and_the_waiting_loop_are_open_slices_until_the_end():
    run = single_run()
    run.inflight = {
        10: {"loop": {"state": "waiting-for-batch", "since": 105.0, "awaited_task": 6, "awaited_worker": 0}},
        11: {"phase": "getitem", "t_fetch": 104.5, "index": 13, "indices": [12, 13]},
        12: {"phase": "done", "t_fetch": 104.0, "index": 19},  # finished its batch: nothing open
    }
    trace = build_trace([run], {"findings": []})
    assert structure_problems(trace) == []
    open_slices = [
        (e["pid"], e["name"], e["ts"], e["dur"])
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["tid"] % 10_000 == 999
    ]
    assert open_slices == [
        (1, "waiting for batch 6 (worker 0) at the end", 5e6, 5e6),  # until the run ended at 110
        (2, "getitem of index 13 at the end", 4.5e6, 5.5e6),
    ]


def test_batches_a_stuck_worker_never_sent_come_from_its_slot_once():
    run = single_run(rows=2)  # worker 0 sent tasks 0 and 2 (starts 101.5, 101.51)
    run.inflight = {11: {"recent": [[2, 101.51, 101.514, 101.515, 16], [4, 101.52, 101.524, 101.525, 32]]}}
    trace = build_trace([run], {"findings": []})
    assert structure_problems(trace) == []
    names = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2 and e["name"] != "collate"]
    assert names == ["batch 0", "batch 2", "batch 4"]


def test_a_long_track_is_downsampled_to_the_cap_and_says_so(monkeypatch):
    monkeypatch.setattr(trace_module, "TRACK_CAP", 100)
    trace = build_trace([single_run(rows=1000)], {"findings": []})
    per_worker = [e for e in trace["traceEvents"] if e.get("name", "").startswith("batch ") and e["pid"] == 2]
    assert len(per_worker) == 100
    assert trace["otherData"]["downsampled"] == {
        "loader 0 / worker 0 (pid 11) batches": 10,
        "loader 0 / worker 1 (pid 12) batches": 10,
    }


def test_written_as_json_one_event_per_line(tmp_path: Path):
    trace = build_trace([single_run()], {"findings": []})
    write_trace(tmp_path / "trace.json", trace)
    text = (tmp_path / "trace.json").read_text()
    assert json.loads(text) == json.loads(json.dumps(trace))
    assert text.count("\n") == len(trace["traceEvents"]) + 2


def test_a_failure_costs_the_trace_only(tmp_path: Path):
    problems = trace_problem(
        tmp_path / "missing-dir" / "trace.json", lambda: build_trace([single_run()], {"findings": []})
    )
    assert len(problems) == 1 and problems[0].startswith("could not write trace.json: FileNotFoundError")
