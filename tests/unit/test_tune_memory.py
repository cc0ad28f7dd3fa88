"""tune's memory model on synthetic trials: a load at start is a worker's base, steady growth is extended to the
epoch, trials the OOM killer ended are named so, and nothing projected past the memory left is recommended."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.run.model import ProcessRecord, Series, SystemSeries
from dlprobe.tune.results import collect_trials, recommend
from tests.unit.fakes import MiB, run, series, worker

T0 = 100.0
END = 103.0


def _series(uss_at: list[tuple[float, int]]) -> Series:
    t = [T0 + dt for dt, _ in uss_at]
    uss = [v for _, v in uss_at]
    return Series(t=t, rss=[v + 150 * MiB for v in uss], uss=uss, pss=uss, swap=[0] * len(t))


def _every(step: float, until: float, value: Any) -> list[tuple[float, int]]:
    return [(round(i * step, 2), value(i * step)) for i in range(int(until / step) + 1)]


def _trial_events(nw: int, first_done: dict[int, float], batches: int = 60) -> list[dict[str, Any]]:
    spec = {"key": f"w{nw}-p2-nopin", "num_workers": nw, "prefetch_factor": 2, "pin_memory": False, "stage": "workers"}
    events: list[dict[str, Any]] = [{"ev": "trial_start", "t": T0, **spec}]
    for pid, done in first_done.items():  # each worker's first batch: start + fetch + collate
        events.append({"ev": "worker_batches", "t": T0 + done + 0.4, "pid": pid, "loader": 1, "worker": pid % 10,
                       "t0": T0, "rows": [[0, done - 0.05, 0.05, 0.0, 0]], "stride": 1})  # fmt: skip
    end = {"status": "ok", "error": None, "batches": batches, "samples": 32 * batches, "first_batch_s": 0.3,
           "samples_per_s": 1000.0, "loader_id": 1}  # fmt: skip
    return [*events, {"ev": "trial_end", "t": END, **spec, **end}]


def _one_trial(workers: list[ProcessRecord], first_done: dict[int, float], epoch: int = 625) -> dict[str, Any]:
    rows, lost = collect_trials(run([], workers, events=_trial_events(len(workers), first_done)), epoch)
    assert lost is None
    return rows[0]


def test_a_table_loaded_at_start_is_each_workers_base_even_when_one_worker_loads_late():
    # Two workers hold their 360 MiB table from the first reading; the third shares two busy cores and fills its
    # table until 2.3 s, delivering its first batch only then: a one-time load, not growth over the epoch.
    flat = _every(0.5, 3.0, lambda t: 360 * MiB)
    slow = _every(0.5, 3.0, lambda t: int(min(360, 10 + 152 * t) * MiB))
    workers = [worker(11, 0, _series(flat), 1), worker(12, 1, _series(flat), 1), worker(13, 2, _series(slow), 1)]
    row = _one_trial(workers, {11: 0.3, 12: 0.3, 13: 2.4})
    assert not row["worker_uss_growth_bytes"]
    assert row["projected_epoch_bytes"] == 3 * 360 * MiB


def test_steady_growth_is_fitted_after_the_first_batch_and_extended_to_the_epoch():
    # 20 MiB/s per worker from its first batch to the end: 60 batches in 3 s, 30 per worker.
    growing = _every(0.5, 3.0, lambda t: int((40 + 20 * t) * MiB))
    workers = [worker(21, 0, _series(growing), 1), worker(22, 1, _series(growing), 1)]
    row = _one_trial(workers, {21: 0.3, 22: 0.3})
    growth = row["worker_uss_growth_bytes"]
    assert 45 * MiB <= growth <= 55 * MiB  # 20 MiB/s over the ~2.5 s steady window
    # the rest of the epoch: 565 batches, ~283 per worker, each ~1.8 MiB
    assert row["projected_epoch_bytes"] > 2 * (100 + 400) * MiB


def _oom_run(kernel: dict[str, Any], counts: list[int | None]) -> list[dict[str, Any]]:
    events = _trial_events(2, {31: 0.3, 32: 0.3})
    events[-1].update(status="crashed", error="RuntimeError: DataLoader worker (pid(s) 32) exited unexpectedly")
    flat = _series(_every(0.5, 1.0, lambda t: 300 * MiB))
    system = SystemSeries(t=[T0 - 0.5, T0 + 1.0, T0 + 2.0], cgroup_usage=[400 * MiB, 1790 * MiB, 900 * MiB],
                          cgroup_limit=1800 * MiB, cgroup_oom_kills=counts)  # fmt: skip
    data = run([], [worker(31, 0, flat, 1), worker(32, 1, flat, 1)], system, events)
    data.kernel = kernel
    rows, _ = collect_trials(data, 625)
    return rows


def test_a_trial_the_kernel_log_names_is_oom_with_the_memory_at_death():
    line = "Out of memory: Killed process 32 (python) total-vm:900000kB, anon-rss:358400kB"
    kill = {"pid": 32, "comm": "python", "anon_rss_bytes": 350 * MiB, "shmem_rss_bytes": 0, "line": line}
    [row] = _oom_run({"readable": True, "kills": [kill]}, [None, None, None])
    assert row["status"] == "oom" and row["oom_kill_pid"] == 32
    assert row["killed_rss_bytes"] == 350 * MiB and row["memory_at_death_bytes"] == 1790 * MiB
    assert row["error"].startswith("killed by the kernel's OOM killer (the kernel log): pid 32 (python), 350 MiB")


def test_the_cgroups_oom_kill_count_alone_names_the_trial_oom():
    [row] = _oom_run({"readable": False, "kills": []}, [0, 1, 1])
    assert row["status"] == "oom" and row["cgroup_oom_kills"] == 1


def test_without_readable_evidence_a_crash_stays_a_crash():
    [row] = _oom_run({"readable": False, "kills": []}, [None, None, None])
    assert row["status"] == "crashed" and "oom_kill_pid" not in row


def test_nothing_at_or_above_a_killed_worker_count_nor_past_the_memory_left_is_recommended():
    trials = [
        {"num_workers": 2, "prefetch_factor": 2, "pin_memory": False, "stage": "workers", "status": "ok",
         "samples_per_s": 900.0, "projected_epoch_bytes": 730 * MiB},
        {"num_workers": 4, "prefetch_factor": 2, "pin_memory": False, "stage": "workers", "status": "ok",
         "samples_per_s": 1800.0, "projected_epoch_bytes": 1700 * MiB, "uncounted_per_worker_bytes": 30 * MiB},
        {"num_workers": 4, "prefetch_factor": 1, "pin_memory": False, "stage": "prefetch", "status": "ok",
         "samples_per_s": 1790.0, "projected_epoch_bytes": 1450 * MiB},
        {"num_workers": 5, "prefetch_factor": 2, "pin_memory": False, "stage": "workers", "status": "oom"},
    ]  # fmt: skip
    # The cgroup charged 30 MiB per worker beyond its private memory: 4 workers keep 120 MiB free.
    chosen, reason = recommend(trials, 1800 * MiB, 0.05)
    assert chosen is not None and (chosen["num_workers"], chosen["prefetch_factor"]) == (4, 1), reason
    assert trials[1]["reserve_bytes"] == 120 * MiB and trials[1]["fits_memory"] is False
    chosen, reason = recommend(trials, 1500 * MiB, 0.05)  # now neither 4-worker trial fits with its reserve
    assert chosen is not None and chosen["num_workers"] == 2, reason
    chosen, _ = recommend(trials, 2100 * MiB, 0.05)  # both fit: the default prefetch, not 1 within noise of it
    assert chosen is not None and (chosen["num_workers"], chosen["prefetch_factor"]) == (4, 2)
    trials[2]["num_workers"] = 5  # ran as many workers as the OOM killer ended: never recommended
    trials[2]["projected_epoch_bytes"] = 10 * MiB
    chosen, _ = recommend(trials, 1800 * MiB, 0.05)
    assert chosen is not None and chosen["num_workers"] == 2


def test_the_memory_left_is_read_when_the_first_trial_begins_so_the_parent_is_counted():
    from dlprobe.tune.results import memory_available

    # The supervisor alone at the first reading (20 MiB); the script with torch and its dataset by the first trial.
    system = SystemSeries(t=[T0 - 2, T0 - 0.1, T0 + 1], cgroup_usage=[20 * MiB, 180 * MiB, 900 * MiB],
                          cgroup_limit=1800 * MiB, available=[None, None, None])  # fmt: skip
    memory = memory_available(run([], [], system, _trial_events(2, {})))
    assert memory["budget_bytes"] == 1620 * MiB and memory["parent_bytes"] == 180 * MiB


def test_the_reserve_is_what_the_trials_measured_not_a_share_of_the_room():
    from dlprobe.tune.results import worker_reserve

    trials = [
        {"num_workers": 1, "status": "ok", "worker_uss_peak_bytes": 165 * MiB, "uncounted_per_worker_bytes": MiB},
        {"num_workers": 3, "status": "ok", "worker_uss_peak_bytes": 161 * MiB, "uncounted_per_worker_bytes": 2 * MiB},
        {"num_workers": 4, "status": "oom", "worker_uss_peak_bytes": 100 * MiB},  # not a peak it held to the end
    ]  # fmt: skip
    assert worker_reserve(trials) == 4 * MiB + 2 * MiB  # a worker's peak varied by 4 MiB; the cgroup charged 2 more
    # Nothing measured: no reserve, and the recommendation keeps run's flat share (loader_model/worker_memory.py)
    assert worker_reserve([]) is None


def test_the_parent_is_the_users_script_without_page_cache_nor_dlprobes_supervisor():
    from dlprobe.tune.results import memory_available

    # benchmarks/tune_regret.py's memory kind, 800 MiB: 274 MiB held at the first trial, 87 MiB of it page cache the
    # kernel drops first (dlprobe's run directory, files read) and 18 MiB dlprobe's supervisor in the same cgroup.
    system = SystemSeries(t=[T0 - 0.1, T0 + 1], cgroup_usage=[274 * MiB, 600 * MiB], cgroup_limit=800 * MiB,
                          available=[None, None])  # fmt: skip
    events = _trial_events(2, {})
    events[0] |= {"cgroup_reclaimable_bytes": 87 * MiB, "cgroup_limit_dir": "/sys/fs/cgroup/job"}
    own = {"private_bytes": 18 * MiB, "limit_dir": "/sys/fs/cgroup/job"}
    memory = memory_available(run([], [], system, events), own)
    assert memory["parent_bytes"] == 169 * MiB and memory["budget_bytes"] == 631 * MiB
    assert memory["page_cache_bytes"] == 87 * MiB and memory["supervisor_bytes"] == 18 * MiB
    elsewhere = memory_available(run([], [], system, events), own | {"limit_dir": "/sys/fs/cgroup/other"})
    assert elsewhere["parent_bytes"] == 187 * MiB  # a supervisor outside the job's cgroup holds none of its memory
    # The script read 280 MiB itself as the trial began (the supervisor's sample was older), and its own process
    # grew by 7 MiB during the trials: the parent the workers share the limit with is that, less the same two.
    events[0]["cgroup_usage_bytes"] = 280 * MiB
    main = ProcessRecord(1, "main", comm="python", series=series([0] * 3, [219 * MiB, 226 * MiB, 224 * MiB], T0 - 0.5))
    memory = memory_available(run([], [main], system, events), own)
    assert memory["parent_bytes"] == (280 - 87 - 18 + 7) * MiB and memory["parent_growth_bytes"] == 7 * MiB
