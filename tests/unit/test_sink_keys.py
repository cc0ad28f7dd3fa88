"""`--log-to`: the supervisor's live summary (supervisor/live_summary.py) and the keys a training process logs of it
(in_training/sink_keys.py): pure, bounded by what is running now."""

from __future__ import annotations

import io
import os
from typing import Any

from dlprobe.in_training.sink_keys import keys_for
from dlprobe.rundir.schema import LIVE_WAIT_WINDOW_S
from dlprobe.supervisor.live_summary import WaitWindows, build
from dlprobe.supervisor.prom.metrics import MAX_LOADERS_PER_PROCESS
from dlprobe.supervisor.run_watch import Progress
from dlprobe.supervisor.sampler import Sampler

MiB = 1 << 20


def _summary() -> dict[str, Any]:
    return {
        "t": 1000.0,
        "shm_used": 3 * MiB,
        "shm_total": 64 * MiB,
        "processes": [
            {
                "pid": 101,
                "rank": None,
                "uss": 300 * MiB,
                "pss": 310 * MiB,
                "rss": None,
                "loaders": [
                    {
                        "loader": 0,
                        "batches": 7,
                        "data_wait_s": 1.5,
                        "data_wait_share": 0.25,
                        "workers": [
                            {
                                "worker": 1,
                                "pid": 202,
                                "uss": 40 * MiB,
                                "pss": 90 * MiB,
                                "pss_anon": 35 * MiB,
                                "pss_file": None,
                                "pss_shmem": 1024,
                                "rss": 200 * MiB,
                                "fds": 12,
                            },  # fmt: skip
                        ],
                    }
                ],
            },
            {"pid": 102, "uss": 1, "loaders": [{"loader": 0, "workers": [{"worker": 0, "uss": 5 * MiB}]}]},
        ],
    }


def test_a_process_logs_its_own_workers_in_mib_and_the_machines_shm() -> None:
    keys = keys_for(_summary(), 101)
    assert keys == {
        "dlprobe/shm_mib": 3.0,
        "dlprobe/main/uss_mib": 300.0,
        "dlprobe/main/pss_mib": 310.0,
        "dlprobe/loader0/data_wait_share": 0.25,
        "dlprobe/loader0/workers": 1.0,
        "dlprobe/loader0/worker1/uss_mib": 40.0,
        "dlprobe/loader0/worker1/pss_mib": 90.0,
        "dlprobe/loader0/worker1/pss_anon_mib": 35.0,
        "dlprobe/loader0/worker1/pss_shmem_mib": 0.001,
        "dlprobe/loader0/worker1/rss_mib": 200.0,
        "dlprobe/loader0/worker1/open_fds": 12.0,
    }  # a reading the kernel did not give (pss_file, the main rss) is left out, never logged as 0


def test_another_process_gets_only_its_own_entry_and_a_stranger_only_shm() -> None:
    own = {"dlprobe/main/uss_mib": 0.0, "dlprobe/loader0/workers": 1.0, "dlprobe/loader0/worker0/uss_mib": 5.0}
    assert keys_for(_summary(), 102) == {"dlprobe/shm_mib": 3.0, **own}
    assert keys_for(_summary(), 999) == {"dlprobe/shm_mib": 3.0}


def test_a_summary_of_the_wrong_shape_gives_what_it_can_never_an_error() -> None:
    assert keys_for(None, 1) == {}
    assert keys_for([1, 2], 1) == {}
    assert keys_for({"shm_used": "x", "processes": "y"}, 1) == {}
    odd = {"processes": [7, {"pid": 1, "uss": True, "loaders": [None, {"loader": "0"}, {"loader": 2, "workers": [3]}]}]}
    assert keys_for(odd, 1) == {"dlprobe/loader2/workers": 0.0}


def _run() -> tuple[Progress, Sampler]:
    progress = Progress()
    sampler = Sampler(os.getpid(), io.StringIO(), None)
    progress.feed(
        [
            {"ev": "epoch", "pid": 100, "loader": 0,
             "workers": [{"pid": 200, "worker_id": 0}, {"pid": 201, "worker_id": 1}]},
            {"ev": "batches", "pid": 100, "t": 10.0, "loader": 0, "waits": [0.5], "total": 1},
        ],
        sampler,
    )  # fmt: skip
    sampler.known |= {100, 200, 201}
    sampler.last = {100: {"uss": 300 * MiB}, 200: {"uss": 40 * MiB, "pss_anon": 9, "fd": 5}, 201: {"uss": 41 * MiB}}
    sampler.last_system = {"shm": {"used": 5, "total": 64}}
    return progress, sampler


def test_the_summary_holds_the_live_workers_and_drops_one_that_exited() -> None:
    progress, sampler = _run()
    windows = WaitWindows()
    summary = build(progress, sampler, 100, 12.0, windows)
    [process] = summary["processes"]
    [loader] = process["loaders"]
    assert (process["pid"], process["uss"], loader["batches"], loader["data_wait_s"]) == (100, 300 * MiB, 1, 0.5)
    assert [(w["worker"], w["uss"]) for w in loader["workers"]] == [(0, 40 * MiB), (1, 41 * MiB)]
    assert loader["workers"][0]["pss_anon"] == 9 and loader["workers"][0]["fds"] == 5
    assert loader["data_wait_share"] is None  # one batches event: no span yet
    assert summary["shm_used"] == 5
    sampler.gone.add(201)
    [loader] = build(progress, sampler, 100, 13.0, windows)["processes"][0]["loaders"]
    assert [w["worker"] for w in loader["workers"]] == [0]
    assert keys_for(build(progress, sampler, 100, 13.0, windows), 100).keys() >= {"dlprobe/loader0/worker0/uss_mib"}
    assert "dlprobe/loader0/worker1/uss_mib" not in keys_for(build(progress, sampler, 100, 13.0, windows), 100)


def test_a_process_building_a_loader_per_epoch_keeps_its_latest_loaders_only() -> None:
    progress, sampler = _run()
    progress.feed([{"ev": "batches", "pid": 100, "loader": i, "waits": [0.1], "total": 1} for i in range(50)], sampler)
    loaders = [row["loader"] for row in build(progress, sampler, 100, 1.0, WaitWindows())["processes"][0]["loaders"]]
    assert loaders == list(range(50 - MAX_LOADERS_PER_PROCESS, 50))


def test_the_data_wait_share_is_over_the_recent_window_of_the_loops_clock() -> None:
    windows = WaitWindows()
    key = (100, 0)
    assert windows.share(key, None, 0.0) is None
    assert windows.share(key, 0.0, 0.0) is None
    assert windows.share(key, 0.0, 0.0) is None  # the same event again: still no span
    assert windows.share(key, 2.0, 1.0) == 0.5
    assert windows.share(key, 4.0, 1.0) == 0.25
    # later the loop stops waiting: the old waits leave the window
    at = 4.0
    for _ in range(int(LIVE_WAIT_WINDOW_S) + 2):
        at += 1.0
        share = windows.share(key, at, 1.0)
    assert share == 0.0
    windows.keep_only(set())
    assert windows.points == {}
