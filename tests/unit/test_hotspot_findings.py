"""worker-hotspots on a synthetic run: the user's function is named, dlprobe's own recording frames never are."""

from __future__ import annotations

from dlprobe.analysis.hotspot_findings import find_worker_hotspots
from dlprobe.analysis.model import Epoch
from dlprobe.analysis.stackfile import StackCount, StackProfile
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
    assert finding.fix.startswith("Speed up parse_row (train.py): it is your dataset's own code and took 50%")
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
