"""DataLoader workers that are threads of the training process (torch's worker_method="thread"), under `dlprobe run`.

No torch release has thread workers yet: where the installed torch lacks them, tests/scripts/thread_workers.py runs
the stand-in of tests/scripts/thread_worker_loader.py (torch's own iterator with its workers made threads; see its
docstring for what is faked). The last test checks that with process workers nothing of this shows.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from torch.utils.data import DataLoader

from dlprobe.rundir.inflight_format import read_all

TORCH_HAS_THREAD_WORKERS = "worker_method" in inspect.signature(DataLoader).parameters


def _script_threads(stdout: str) -> dict[int, list[float]]:
    """What each worker thread said of itself: native id -> [samples, its own CPU seconds]."""
    line = next(line for line in stdout.splitlines() if line.startswith("threads "))
    return {int(tid): seen for tid, seen in json.loads(line.removeprefix("threads ")).items()}


def _trace_tracks(run_dir: Any) -> dict[str, list[str]]:
    """trace.json's process tracks by name, each with the names of its slices."""
    events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    tracks: dict[str, list[str]] = {name: [] for name in names.values()}
    for e in events:
        if e.get("ph") == "X":
            tracks[names[e["pid"]]].append(e["name"])
    return tracks


def _events(run_dir: Any, kind: str) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["ev"] == kind]


def test_each_worker_thread_is_reported_with_its_batches_and_cpu(probe):
    result = probe("thread_workers.py")
    assert result.returncode == 0, result.stderr
    truth = _script_threads(result.stdout)
    report = result.report
    main_pid = report["processes"][0]["pid"] if report["processes"] else None

    (finding,) = result.findings("thread-workers")
    assert finding["severity"] == "info" and finding["loader_id"] == 0
    rows = finding["evidence"]["worker_threads"]
    assert [r["worker_id"] for r in rows] == [0, 1]
    # every thread the workers ran in, one per worker and epoch (non-persistent workers: new threads each epoch)
    assert sorted(t for r in rows for t in r["tids"]) == sorted(truth)
    # batches per thread as the loop received them: 640 samples of 8, 2 epochs, in turn from the 2 workers
    assert [r["batches"] for r in rows] == [80, 80]
    for row in rows:
        own_cpu = sum(truth[t][1] for t in row["tids"])
        if row["cpu_s"] is not None:  # read from /proc/PID/task/TID: never more than the thread used itself
            assert 0 <= row["cpu_s"] <= own_cpu + 0.011
    assert any(r["cpu_s"] is not None for r in rows), finding["detail"]
    for code in ("cow-growth", "worker-killed", "shm-pressure", "fork-hazard", "spawn-copy", "worker USS/PSS"):
        assert code in finding["evidence"]["not_applicable"]
        assert code in finding["detail"]
    # and those findings are not reasoned on missing worker processes
    codes = {f["code"] for f in report["findings"]}
    assert not codes & {"cow-growth", "worker-killed", "shm-pressure", "fork-hazard", "spawn-copy", "probe-degraded"}

    (loader,) = report["loaders"]
    assert loader["worker_method"] == "thread" and loader["start_method"] == "thread" and loader["workers"] == []
    assert sorted(t["tid"] for t in loader["worker_threads"]) == sorted(truth)
    # the threads are no processes: the only process row is the training process
    assert [p["role"] for p in report["processes"]] == ["main"]
    assert _events(result.run_dir, "start_method")[0]["start_method"] == "thread"
    assert not _events(result.run_dir, "fork_state")  # nothing forked: no fork-time state recorded

    # each thread wrote its own in-flight slot, named by its native id; the training process's slot is still its own
    slots = read_all(result.run_dir)
    for tid in truth:
        assert slots[tid]["role"] == "thread-worker" and slots[tid]["pid"] == main_pid
        assert slots[tid]["fetches"] > 0
    assert slots[main_pid]["role"] == "main" and slots[main_pid]["loop"] is not None
    # the per-batch rows each thread timed carry its thread id, and trace.json draws a track per thread from them
    assert {e.get("tid") for e in _events(result.run_dir, "worker_batches")} == set(truth)
    tracks = _trace_tracks(result.run_dir)
    for tid, (samples, _cpu) in truth.items():
        (track,) = [name for name in tracks if name.endswith(f"(thread {tid})")]
        assert track.startswith("loader 0 / worker ")
        assert tracks[track].count("collate") == samples // 8  # one batch slice (and its collate) per batch


def test_a_stuck_worker_thread_is_named_with_its_index_and_its_own_stack(probe):
    result = probe("thread_workers.py", "hang", options=["--hang-timeout", "3", "--on-hang", "stop"])
    (hang,) = result.findings("worker-hang")
    evidence = hang["evidence"]
    main_pid = result.report["processes"][0]["pid"]
    # sample 37 is in batch 4 (batch size 8), which the iterator gave worker 0 (batches go to the workers in turn)
    assert evidence["worker_id"] == 0 and evidence["index"] == 37 and evidence["phase"] == "getitem"
    assert evidence["process_pid"] == main_pid and evidence["tid"] == evidence["pid"] != main_pid
    assert f"thread {evidence['tid']} of pid {main_pid}" in hang["title"]
    # the thread's own frames, from the one dump of the training process
    assert evidence["stuck_frame"].startswith("SquaresDataset.__getitem__ (thread_workers.py:")
    assert "threading.Event().wait()" in evidence["stuck_frame"]
    assert not result.findings("main-hang")
    # trace.json: the stuck thread's track ends with the sample it is stuck on
    (track,) = [name for name in _trace_tracks(result.run_dir) if name.endswith(f"(thread {evidence['tid']})")]
    assert "getitem of index 37 at the end" in _trace_tracks(result.run_dir)[track]


def test_process_workers_show_nothing_of_threads(healthy_run):
    result = healthy_run
    assert result.returncode == 0, result.stderr
    assert not result.findings("thread-workers")
    (loader,) = _events(result.run_dir, "loader")
    # the installed torch's own setting: absent from released torch, "multiprocessing" where it exists
    assert loader["worker_method"] == ("multiprocessing" if TORCH_HAS_THREAD_WORKERS else None)
    (entry,) = result.report["loaders"]
    assert entry["worker_method"] == loader["worker_method"] and entry["worker_threads"] == []
    assert len({w["pid"] for w in entry["workers"]}) == 4  # 2 worker processes in each of 2 epochs
    for epoch in _events(result.run_dir, "epoch"):
        assert "threads" not in epoch and "worker_method" not in epoch
        assert [w["worker_id"] for w in epoch["workers"]] == [0, 1]
    assert _events(result.run_dir, "start_method")[0]["start_method"] in ("fork", "spawn", "forkserver")
    assert {s["role"] for s in read_all(result.run_dir).values()} == {"main", "worker"}
    assert not [line for line in (result.run_dir / "samples.jsonl").read_text().splitlines() if '"th":' in line]
