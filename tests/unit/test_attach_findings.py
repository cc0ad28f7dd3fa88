"""`dlprobe attach`'s findings on synthetic attached runs, and how it tells workers, training processes and
launchers apart from /proc facts."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.findings.attach import (
    find_attached_growth,
    find_attached_stuck,
    find_attached_workers_gone,
    format_eta,
)
from dlprobe.analysis.run.model import ProcessRecord, SystemSeries
from dlprobe.supervisor.attach_tree import ROLE_LAUNCHER, ROLE_MAIN, ROLE_OTHER, ROLE_WORKER, Proc, classify
from tests.unit.fakes import MiB, run, series, worker

GiB = 1024 * MiB
PY = ["/usr/bin/python", "train.py"]


def _attached(processes: list[ProcessRecord], system: SystemSeries, record: dict[str, Any]):
    r = run([], processes, system)
    r.meta["attached"] = True
    r.attach = {"t_start": 100.0, "t_end": 110.0, "rerun": "dlprobe run train.py", **record}  # type: ignore[typeddict-item]
    return r


def _cgroup(limit: int, usage: int) -> SystemSeries:
    return SystemSeries(t=[100.0, 110.0], cgroup_usage=[usage, usage], cgroup_limit=limit, available=[20 * GiB] * 2)


def test_eta_reads_like_a_person_would_say_it() -> None:
    assert format_eta(7800) == "about 2 h 10 min"
    assert format_eta(45 * 60) == "about 45 min"
    assert format_eta(30) == "about 30 s"


def test_growing_worker_is_projected_to_the_cgroup_limit() -> None:
    # worker 3 grows 1 MiB/s over 11 readings; 7800 MiB are left under the cgroup limit: 2 h 10 min
    grows = worker(203, 3, series([100 * MiB + i * MiB for i in range(11)], [300 * MiB] * 11))
    flat = worker(202, 2, series([100 * MiB] * 11, [300 * MiB] * 11))
    r = _attached([flat, grows], _cgroup(10 * GiB, 10 * GiB - 7800 * MiB), {})
    (finding,) = find_attached_growth(r)
    assert finding.title.startswith("Worker 3 (pid 203) grows 60.0 MiB/min")
    assert finding.title.endswith("at this rate the job reaches the cgroup memory limit in about 2 h 10 min")
    assert [row["pid"] for row in finding.evidence["growing"]] == [203]
    assert finding.severity == "warning"


def test_growth_below_the_threshold_is_not_projected() -> None:
    slow = worker(203, 3, series([100 * MiB + i * 700 * 1024 for i in range(11)], [300 * MiB] * 11))  # 6.8 MiB
    assert find_attached_growth(_attached([slow], _cgroup(10 * GiB, 2 * GiB), {})) == []


def test_not_an_attached_run_gives_nothing() -> None:
    grows = worker(203, 3, series([100 * MiB + i * MiB for i in range(11)], [300 * MiB] * 11))
    r = _attached([grows], _cgroup(10 * GiB, 2 * GiB), {})
    r.meta.pop("attached")
    assert find_attached_growth(r) == [] and find_attached_stuck(r) == []


def _entry(pid: int, role: str, cpu_s: float, stack: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"pid": pid, "role": role, "main_pid": 1 if role == "worker" else None, "cpu_s": cpu_s, "seen_s": 10.0,
            "gone": False, "stack": stack or []}  # fmt: skip


def _thread(*frames: tuple[str, str, bool]) -> list[dict[str, Any]]:
    return [{"name": "MainThread", "frames": [
        {"name": n, "file": f, "line": 7, "native": False, "user": u} for n, f, u in frames]}]  # fmt: skip


def test_idle_tree_names_the_worker_in_user_code() -> None:
    main = ProcessRecord(1, "main", series=series([1], [1]))
    w0, w1 = worker(2, 0, series([1], [1])), worker(3, 1, series([1], [1]))
    stuck = _thread(("read_shard", "/home/me/data.py", True), ("_worker_loop", "/x/site-packages/w.py", False))
    idle = _thread(("get", "/usr/lib/python3.11/queue.py", False), ("_worker_loop", "/x/site-packages/w.py", False))
    record = {"processes": [_entry(1, "main", 0.01), _entry(2, "worker", 0.0, idle), _entry(3, "worker", 0.0, stuck)]}
    (finding,) = find_attached_stuck(_attached([main, w0, w1], SystemSeries(), record))
    assert finding.code == "attached-worker-stuck"
    assert finding.title.startswith("Stuck: worker 1 (pid 3) used no CPU for the 10 s watched, in your code at "
                                    "read_shard (data.py:7)")  # fmt: skip


def test_a_worker_whose_memory_moves_on_little_cpu_is_not_stuck() -> None:
    # each worker keeps a 1 MiB sample a tick: 16 MiB/s for under 0.05 s of CPU in 6 s (clock ticks are 10 ms)
    main = ProcessRecord(1, "main", series=series([1], [1]))
    filling = worker(
        2, 0, series([100 * MiB + i * 16 * MiB for i in range(6)], [300 * MiB + i * 16 * MiB for i in range(6)])
    )
    record = {"processes": [_entry(1, "main", 0.01), _entry(2, "worker", 0.03)]}
    assert find_attached_stuck(_attached([main, filling], SystemSeries(), record)) == []
    still = worker(2, 0, series([100 * MiB] * 6, [300 * MiB] * 6))
    assert [f.code for f in find_attached_stuck(_attached([main, still], SystemSeries(), record))] == [
        "attached-loop-stuck"
    ]


def test_a_busy_process_is_not_stuck() -> None:
    main = ProcessRecord(1, "main", series=series([1], [1]))
    w0 = worker(2, 0, series([1], [1]))
    record = {"processes": [_entry(1, "main", 0.01), _entry(2, "worker", 0.2)]}  # 2% of the window: working
    assert find_attached_stuck(_attached([main, w0], SystemSeries(), record)) == []


def _proc(pid: int, ppid: int, cmdline: list[str], comm: str = "python") -> Proc:
    return Proc(pid, ppid, comm, cmdline, cmdline[0].rsplit("/", 1)[-1].startswith("python"), float(pid))


def test_tree_roles_under_torchrun_with_fork_spawn_and_helpers() -> None:
    agent = _proc(10, 1, ["/usr/bin/python", "/usr/bin/torchrun", "train.py"], "pt_elastic")
    rank0 = _proc(11, 10, ["/usr/bin/python", "-u", "train.py"])
    rank1 = _proc(12, 10, ["/usr/bin/python", "-u", "train.py"])
    forked = _proc(13, 11, ["/usr/bin/python", "-u", "train.py"])  # same command line as its parent: forked
    named = _proc(14, 11, ["/usr/bin/python", "-u", "train.py"], "pt_data_worker")
    spawned = _proc(15, 12, ["/usr/bin/python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"])
    tracker = _proc(16, 12, ["/usr/bin/python", "-c", "from multiprocessing.resource_tracker import main;main(5)"])
    shell = _proc(9, 1, ["/bin/bash", "run.sh"], "bash")
    procs = {p.pid: p for p in (shell, agent, rank0, rank1, forked, named, spawned, tracker)}
    agent.ppid = 9
    classify(procs)
    roles = {pid: p.role for pid, p in procs.items()}
    assert roles == {9: ROLE_LAUNCHER, 10: ROLE_LAUNCHER, 11: ROLE_MAIN, 12: ROLE_MAIN, 13: ROLE_WORKER,
                     14: ROLE_WORKER, 15: ROLE_WORKER, 16: ROLE_OTHER}  # fmt: skip
    assert [procs[w].main_pid for w in (13, 14, 15)] == [11, 11, 12]


def test_of_two_workers_gone_in_one_poll_the_one_never_read_went_first() -> None:
    # a worker killed just as attach began: gone before the sampler's first read, and torch stopped the other in the
    # same 20 ms poll, both reaped before their exit status was seen: the order in the poll is nobody's, the readings'
    # is evidence (the other was still there to be read)
    read = worker(205, 0, series([100 * MiB] * 3, [300 * MiB] * 3))
    unread = worker(206, 1, series([0], [0]))  # the sampler records a process gone before its first read as 0
    gone = [{"pid": pid, "role": "worker", "first_seen": 100.0, "gone": True, "gone_t": 100.02, "exit": None}
            for pid in (205, 206)]  # fmt: skip
    (finding,) = find_attached_workers_gone(_attached([read, unread], _cgroup(10 * GiB, 2 * GiB), {"processes": gone}))
    assert finding.evidence["gone"][0]["pid"] == 206
    assert finding.title.index("pid 206") < finding.title.index("pid 205")
    both_read = worker(206, 1, series([100 * MiB] * 3, [300 * MiB] * 3))  # no evidence either way: the poll's order
    (finding,) = find_attached_workers_gone(
        _attached([read, both_read], _cgroup(10 * GiB, 2 * GiB), {"processes": gone})
    )
    assert finding.evidence["gone"][0]["pid"] == 205
