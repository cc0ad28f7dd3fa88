"""Pure parts of the advice findings and of tune, on synthetic data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlprobe.analysis.findings.startup import hot_path
from dlprobe.analysis.findings.throughput import (
    find_input_bound,
    find_too_many_workers,
    suggest_workers,
)
from dlprobe.analysis.findings.worker_use import find_pin_memory
from dlprobe.analysis.run.model import Epoch, LoaderRecord
from dlprobe.analysis.run.stackfile import parse_stacks
from dlprobe.in_training.sample_hashes import DuplicateCounter
from dlprobe.system.cpus import cgroup_cpu_quota
from dlprobe.tune.results import project_epoch_bytes, recommend
from tests.unit.fakes import MiB, loader, run


@pytest.mark.parametrize(
    ("current", "load", "step", "cores", "expected"),
    [(0, 0.050, 0.010, 8, 7), (0, 0.050, 0.010, 2, 2), (2, 0.1, 0.0, 4, 4), (4, 0.1, 0.01, 4, 4)],
)
def test_suggested_workers_cover_the_load_within_the_cores(current, load, step, cores, expected):
    assert suggest_workers(current, load, step, cores) == expected


def _epoch(waits: list[float], step: float) -> Epoch:
    t = 100.0
    for w in waits:
        t += w + step
    return Epoch(0, 100.0, 0.0, t_end=t, batches=len(waits), waits=list(waits))


def test_input_bound_needs_a_large_wait_share():
    starved = run([loader(num_workers=0, epochs=[_epoch([0.04] * 30, 0.01)])], [])
    starved.meta["machine"]["usable_cores"] = 4
    [finding] = find_input_bound(starved)
    assert finding.evidence["wait_share"] == pytest.approx(0.8, abs=0.01)
    assert finding.evidence["suggested_num_workers"] == 4  # ceil(1.25 * 40 ms / 10 ms) = 5, capped at 4 cores
    fed = run([loader(num_workers=2, epochs=[_epoch([0.001] * 30, 0.02)])], [])
    assert find_input_bound(fed) == []


def test_input_bound_gives_no_worker_advice_from_settings_it_could_not_read():
    # hooks.loader_config failed: the loader event has only `loader` and `inspect_error`, no num_workers
    epoch = _epoch([0.04] * 30, 0.01)
    epoch.worker_pids = [11, 12, 13, 14]
    starved = run([LoaderRecord(0, {"inspect_error": "TypeError('int() ...')"}, 100.0, "fork", [epoch])], [])
    starved.meta["machine"]["usable_cores"] = 4
    lo = starved.loaders[0]
    assert (lo.settings_read, lo.num_workers_setting, lo.num_workers) == (False, None, 4)
    [finding] = find_input_bound(starved)
    assert finding.evidence["num_workers"] is None and finding.evidence["workers_seen"] == 4
    assert finding.evidence["missing"] == ["num_workers", "persistent_workers", "prefetch_factor"]
    assert "settings could not be read" in finding.title
    assert "num_workers=" not in finding.fix and "persistent_workers=True" not in finding.fix
    assert find_too_many_workers(starved) == []


def test_pin_memory_findings_for_gpu_and_no_accelerator():
    gpu = run([loader()], [], events=[{"ev": "accel", "loader": 0, "pin_effective": False, "cuda_initialized": True}])
    [finding] = find_pin_memory(gpu)
    assert finding.severity == "warning" and "non_blocking=True" in finding.fix
    cpu = run([loader()], [], events=[{"ev": "accel", "loader": 0, "pin_effective": False, "cuda_initialized": False}])
    cpu.loaders[0].config["pin_memory"] = True
    [finding] = find_pin_memory(cpu)
    assert finding.severity == "info" and "no accelerator is found" in finding.detail
    cpu.loaders[0].config["pin_memory"] = False
    assert find_pin_memory(cpu) == []


def test_hot_path_follows_the_calls_holding_most_of_the_time():
    walk = [["t.py", "<module>", 1], ["t.py", "index", 5], ["<frozen os>", "_walk", 368]]
    stacks = [
        {"seconds": 3.0, "frames": walk},
        {"seconds": 1.0, "frames": walk[:2] + [["t.py", "check", 9]]},
        {"seconds": 0.5, "frames": [["t.py", "<module>", 2], ["t.py", "other", 20]]},
    ]
    path = hot_path(stacks)
    assert [p["function"] for p in path] == ["<module>", "index", "_walk"]
    assert path[1]["share"] == pytest.approx(4.0 / 4.5, abs=0.001)


def test_py_spy_raw_lines_are_attributed_to_the_innermost_process():
    text = (
        'process 10:"python train.py";process 11:"python train.py";_worker_loop (worker.py:1);'
        "D.__getitem__ (train.py:8) 56\n"
        'process 10:"python train.py";<module> (train.py:3) 4\n'
    )
    [worker, main] = parse_stacks(text)
    assert (worker.pid, worker.count, worker.frames[-1]) == (11, 56, "D.__getitem__ (train.py:8)")
    assert (main.pid, main.frames) == (10, ["<module> (train.py:3)"])


def test_cgroup_quota_v1_and_v2(tmp_path: Path):
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "job" / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(root=v2, memberships=[("", "/job")]) == 1.5
    v1 = tmp_path / "v1" / "cpu,cpuacct" / "job"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(root=tmp_path / "v1", memberships=[("cpu,cpuacct", "/job")]) is None
    (v1.parent / "cpu.cfs_quota_us").write_text("50000\n")  # a parent's quota binds the child
    (v1.parent / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(root=tmp_path / "v1", memberships=[("cpu,cpuacct", "/job")]) == 0.5


def test_duplicate_counter_sees_repeated_samples_across_batches():
    counter = DuplicateCounter()
    counter.add_batch([torch.arange(8).reshape(4, 2), torch.tensor([0, 1, 2, 3])])
    counter.add_batch([torch.arange(8).reshape(4, 2), torch.tensor([0, 1, 2, 3])])
    counter.add_batch([torch.arange(8, 16).reshape(4, 2), torch.tensor([4, 5, 6, 7])])
    summary = counter.summary()
    assert (summary["samples"], summary["unique"], summary["duplicates"]) == (12, 8, 4)
    assert summary["first_duplicate_at"] == 4


def _trial(nw: int, rate: float, projected: int, pf: int | None = 2, stage: str = "workers") -> dict:
    return {"key": f"w{nw}-{pf}", "num_workers": nw, "prefetch_factor": pf if nw else None, "pin_memory": False,
            "stage": stage, "status": "ok", "samples_per_s": rate, "projected_epoch_bytes": projected}  # fmt: skip


def test_recommend_picks_the_smallest_within_tolerance_that_fits():
    trials = [_trial(0, 100, 0), _trial(1, 190, 200 * MiB), _trial(2, 300, 400 * MiB), _trial(3, 310, 600 * MiB)]
    chosen, reason = recommend(trials, budget=1000 * MiB, tolerance=0.05)
    assert chosen is not None and chosen["num_workers"] == 2  # 300 is within 5% of 310
    assert "num_workers=1 was 39% slower" in reason
    chosen, reason = recommend(trials, budget=390 * MiB, tolerance=0.05)
    assert chosen is not None and chosen["num_workers"] == 1  # 2 and 3 workers would not fit in 390 MiB
    assert "among those whose memory fits" in reason
    assert recommend([t | {"status": "crashed"} for t in trials], 1000 * MiB, 0.05)[0] is None


def test_projected_epoch_memory_is_each_workers_projection_plus_shm_in_flight():
    trial = {"num_workers": 2, "worker_uss_peak_bytes": 100 * MiB, "projected_worker_bytes": 190 * MiB,
             "shm_peak_delta_bytes": 4 * MiB}  # fmt: skip
    # the largest worker's memory at the end of the epoch (results._trial_projection, as run projects it), per worker
    assert project_epoch_bytes(trial) == 2 * 190 * MiB + 4 * MiB
    assert project_epoch_bytes(trial | {"projected_worker_bytes": None}) == 2 * 100 * MiB + 4 * MiB  # not projected
    assert project_epoch_bytes(trial | {"num_workers": 0}) == 4 * MiB
