"""worker-hotspots on a synthetic run: the user's function is named, dlprobe's own recording frames never are."""

from __future__ import annotations

from dlprobe.analysis.findings.hotspots import find_worker_hotspots
from dlprobe.analysis.run.model import Epoch
from dlprobe.analysis.run.stackfile import StackCount, StackProfile
from tests.unit.fakes import loader, run, series, worker

LOOP = "_worker_loop (torch/utils/data/_utils/worker.py:374)"
FETCH = "_map_fetch (dlprobe/target/inflight.py:324)"


def _starved_run(stacks: list[StackCount]):
    # the loop waited 0.9 s of every second: input-bound, so hotspots are worth reporting
    epoch = Epoch(0, t_start=100.0, iter_s=0.0, t_end=110.0, batches=10, waits=[0.9] * 10)
    data = run([loader(epochs=[epoch])], [worker(11, 0, series([1, 2], [3, 4]))])
    data.stacks = StackProfile(rate=10, stacks=stacks)
    return data


def test_user_function_is_named_and_dlprobe_frames_are_not():
    stacks = [
        StackCount(11, [LOOP, FETCH, "MyDataset.__getitem__ (train.py:20)", "parse_row (train.py:8)"], 30),
        StackCount(11, [LOOP, FETCH, "Slot.sample (dlprobe/target/inflight.py:160)"], 10),  # a run saved before
        StackCount(11, [LOOP, FETCH, "InflightSlot.sample (dlprobe/in_training/inflight.py:160)"], 10),
        StackCount(11, [LOOP, FETCH, "default_collate (torch/utils/data/_utils/collate.py:398)"], 10),
    ]
    [finding] = find_worker_hotspots(_starved_run(stacks))
    functions = [row["function"] for row in finding.evidence["top_functions"]]
    assert functions[0] == "parse_row (train.py)"
    assert "default_collate (torch/utils/data/_utils/collate.py)" in functions
    assert not any("dlprobe/" in f for f in functions)
    # The fix names the function and its share itself: on the page the evidence it once pointed "below" to is
    # folded away, and in the terminal it is printed above.
    # (of the 40 samples in the loading code: the 20 inside the probe's own recording are no function's to speed up)
    assert finding.fix.startswith("Speed up parse_row (train.py): it is your dataset's own code and took 75%")
    assert finding.evidence["probe_samples"] == 20
    assert "below" not in finding.fix and "above" not in finding.fix


def test_frames_the_worker_inherited_from_the_parent_at_fork_are_never_named():
    # A forked worker's stack starts with the parent's: the script's <module> and Lightning's CombinedLoader
    # creating the iterators. With TensorDataset (all torch) inside fetch(), those are the only non-torch frames.
    parent = [
        "<module> (train.py:40)",
        "_ModeIterator.__iter__.<locals>.<listcomp> (lightning/pytorch/utilities/combined_loader.py:73)",
        "Popen._launch (multiprocessing/popen_fork.py:71)",
        "BaseProcess._bootstrap (multiprocessing/process.py:314)",
    ]
    torch_fetch = "_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:52)"
    stacks = [
        StackCount(11, [*parent, LOOP, torch_fetch, "TensorDataset.__getitem__ (torch/utils/data/dataset.py:211)"], 30),
        StackCount(11, [*parent, LOOP, torch_fetch, "default_collate (torch/utils/data/_utils/collate.py:398)"], 10),
    ]
    [finding] = find_worker_hotspots(_starved_run(stacks))
    functions = [row["function"] for row in finding.evidence["top_functions"]]
    assert functions == ["TensorDataset.__getitem__ (torch/utils/data/dataset.py)",
                         "default_collate (torch/utils/data/_utils/collate.py)"]  # fmt: skip
    assert "TensorDataset.__getitem__" in finding.title and "listcomp" not in finding.title


GETITEM = "MyDataset.__getitem__ (train.py:20)"


def _clocked_run(fetch_s: float, fetch_cpu_s: float, queued_s: float, rows: int = 10, stride: int = 1):
    """A starved run whose worker timed `rows` batches on its own clocks (rows of 8 fields, worker_batches.py)."""
    data = _starved_run([StackCount(11, [LOOP, FETCH, GETITEM], 40)])
    clocked = [[k, 0.9 * k, fetch_s, 0.01, k, fetch_cpu_s, 0.01, queued_s] for k in range(rows)]
    data.events.append({"ev": "worker_batches", "pid": 11, "loader": 0, "worker": 0, "t0": 101.0, "rows": clocked,
                        "stride": stride})  # fmt: skip
    return data


def test_workers_blocked_inside_the_fetch_are_told_they_wait_and_at_which_line():
    # 100 ms fetches with 5 ms on a CPU and 3 ms queued: blocked (a read, a sleep) 84% of the batch time
    [finding] = find_worker_hotspots(_clocked_run(0.1, 0.005, 0.003))
    assert "mostly wait" in finding.title and "waiting in MyDataset.__getitem__ (train.py:20)" in finding.title
    assert "blocked 84% of the time they build batches" in finding.title
    assert "Speed up" not in finding.fix and "barely help" in finding.fix
    split = finding.evidence["loading_time"]
    assert split["timed_batches"] == 10 and split["fetch_share"] == 0.909 and split["collate_share"] == 0.091
    assert (split["fetch_cpu_share"], split["fetch_queued_share"], split["fetch_blocked_share"]) == (
        0.045,
        0.027,
        0.836,
    )


def test_workers_queued_for_a_core_compute_they_do_not_wait():
    # the same 100 ms fetches, 40 ms on a CPU and 58 ms queued for one (more workers than cores): computing
    [finding] = find_worker_hotspots(_clocked_run(0.1, 0.04, 0.058))
    assert "mostly wait" not in finding.title and finding.fix.startswith("Speed up MyDataset.__getitem__ (train.py)")
    assert finding.evidence["loading_time"]["fetch_queued_share"] == 0.527
    assert "fetch 91% (on a CPU 36%, queued 53%, blocked 2%)" in finding.detail


def test_the_clocks_split_needs_rows_with_clocks_and_counts_a_strided_row_for_its_stride():
    from dlprobe.analysis.measures.fetch_timing import fetch_timing

    data = _clocked_run(0.1, 0.04, -1.0, rows=4, stride=2)  # schedstat unreadable: queued unknown
    timing = fetch_timing(data, data.loaders[0])
    assert timing is not None and timing.batches == 8 and timing.queued_s is None
    assert "queued" not in timing.describe()
    older = _starved_run([StackCount(11, [LOOP, FETCH, GETITEM], 40)])  # a run written before the clocks: 5 fields
    older.events.append({"ev": "worker_batches", "pid": 11, "loader": 0, "worker": 0, "t0": 101.0, "stride": 1,
                         "rows": [[k, 0.9 * k, 0.1, 0.01, k] for k in range(10)]})  # fmt: skip
    assert fetch_timing(older, older.loaders[0]) is None
    [finding] = find_worker_hotspots(older)
    assert "loading_time" not in finding.evidence
