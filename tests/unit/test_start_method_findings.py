"""analysis/findings/start_method.py on synthetic runs: the start-method finding and each loader's one line."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.findings.start_method import (
    INTERPRETER_START_S,
    PARENT_COPY_S_PER_GIB,
    UNPICKLE_PER_PICKLE,
    WORKER_COPY_S_PER_GIB,
    find_start_method,
    predicted_start_s,
    readiness_line,
    start_work_s,
)
from dlprobe.analysis.run.model import Epoch
from tests.unit.fakes import MiB, loader, run, series, worker

LAMBDA = {"name": "dataset", "picklable": False, "pickled_bytes": None, "attribute": "self.transform",
          "kind": "lambda", "reason": "a lambda (Squares.__init__.<locals>.<lambda>)", "error": "..."}  # fmt: skip
PICKLES = {"name": "dataset", "picklable": True, "pickled_bytes": 4 * MiB}


def event(objects: list[dict[str, Any]], chosen: bool = False, guarded: bool | None = True, **kw: Any) -> dict:
    return {"ev": "start_readiness", "t": 100.5, "pid": 1, "loader": 0, "start_method": "fork", "chosen": chosen,
            "num_workers": 2, "objects": objects, "picklable": all(o["picklable"] for o in objects),
            "pickled_bytes": 4 * MiB, "pickle_s": 0.1, "copy_bytes": 20 * MiB, "cpus": 4,
            "main": {"file": "train.py", "guarded": guarded, "iter_line": 12, "imports_s": 1.5,
                     "top_level_work_s": 0.0}, **kw}  # fmt: skip


def test_a_lambda_under_the_default_fork_is_a_warning_naming_it() -> None:
    found = find_start_method(run([loader()], [], events=[event([LAMBDA])]))
    assert [f.severity for f in found] == ["warning"]
    assert "`self.transform` of the dataset is a lambda" in found[0].title
    assert "module's top level" in found[0].fix and "multiprocessing_context='fork'" in found[0].fix
    assert found[0].evidence["blockers"][0]["kind"] == "lambda"


def test_a_lambda_under_a_fork_the_script_chose_is_one_line_only() -> None:
    r = run([loader()], [], events=[event([LAMBDA], chosen=True)])
    assert find_start_method(r) == []
    line = readiness_line(r, r.loaders[0])
    assert line is not None and line.startswith("fork (chosen by the script); forkserver and spawn would fail")


def test_no_main_guard_is_a_warning_with_its_line() -> None:
    found = find_start_method(run([loader()], [], events=[event([PICKLES], guarded=False)]))
    assert len(found) == 1 and "train.py:12" in found[0].title and "__main__" in found[0].fix


def test_nothing_would_change_is_one_line_and_no_finding() -> None:
    r = run([loader()], [], events=[event([PICKLES])])
    assert find_start_method(r) == []
    assert readiness_line(r, r.loaders[0]) == (
        "fork (the interpreter's default); forkserver/spawn: the dataset pickles (4.0 MiB), each worker would hold a "
        "~20.0 MiB copy; its workers would all be started in ~3.4 s"
    )


def _spawn_run(start_after_s: float, epochs: int, persistent: bool = False) -> Any:
    lo = loader(start_method="spawn")
    lo.config["persistent_workers"] = persistent
    events: list[dict[str, Any]] = [event([PICKLES], start_method="spawn", chosen=True)]
    for e in range(epochs):
        t0 = 100.0 + e * 2
        lo.epochs.append(Epoch(e, t0, 0.1, worker_pids=[10 + e]))
        events.append({"ev": "worker_start", "t": t0 + start_after_s, "pid": 10 + e, "loader": 0, "worker_id": 0})
    return run([lo], [], events=events)


def test_spawn_workers_that_start_slowly_every_epoch_are_a_warning() -> None:
    found = find_start_method(_spawn_run(1.5, epochs=4))  # 6 s of a 10 s run
    assert [f.severity for f in found] == ["warning"]
    assert found[0].evidence["measured"]["start_s"] == 1.5 and "persistent_workers=True" in found[0].fix


def test_spawn_workers_started_once_are_not() -> None:
    r = _spawn_run(1.5, epochs=4, persistent=True)
    assert find_start_method(r) == []
    assert readiness_line(r, r.loaders[0]) == (
        "spawn (chosen by the script) (workers started in 1.50 s); forkserver: the dataset pickles (4.0 MiB), each "
        "worker would hold a ~20.0 MiB copy; its workers would all be started in ~3.4 s; fork: no copy up front, "
        "no start-up"
    )


def test_forked_workers_that_copy_far_more_than_a_pickle_is_an_info() -> None:
    grown = series([10 * MiB, 400 * MiB], [300 * MiB, 300 * MiB])
    r = run([loader()], [worker(10, 0, grown)], events=[event([PICKLES])])
    found = find_start_method(r)
    assert [f.severity for f in found] == ["info"] and "forkserver" in found[0].title
    small = series([10 * MiB, 200 * MiB], [300 * MiB, 300 * MiB])  # below COW_WORTH_SWITCH
    assert find_start_method(run([loader()], [worker(10, 0, small)], events=[event([PICKLES])])) == []


def test_predicted_start_up_shares_the_cores() -> None:
    # the main thread ran 1.5 s of CPU a worker redoes, the check pickled 60 KiB in 0.1 s of CPU, the fork server is
    # up and does not preload `__main__` (CPython before 3.14 and 3.13.8)
    main = {"file": "train.py", "guarded": True, "redo_cpu_s": 1.5}
    server = {"running": True, "preloads_main": False}
    e = event([PICKLES], num_workers=8, cpus=2, cpu_share=1.0, pickled_bytes=60 * 1024, pickle_cpu_s=0.1, main=main,
              forkserver=server)  # fmt: skip
    unpickle = 0.1 * UNPICKLE_PER_PICKLE
    assert predicted_start_s(e, "fork") == 0.0
    # the parent pickles 8 copies in turn on its core, then the 8 workers share 2 cores
    assert predicted_start_s(e, "spawn") == round(8 * 0.1 + (1.5 + unpickle) * 4, 3)
    assert predicted_start_s(e, "forkserver") == round(8 * 0.1 + (1.5 - INTERPRETER_START_S + unpickle) * 4, 3)
    # a fork server that imports `__main__` once (CPython 3.14): started first, alone; each worker only unpickles
    preloading = e | {"forkserver": {"running": False, "preloads_main": True}}
    assert predicted_start_s(preloading, "forkserver") == round(INTERPRETER_START_S + 1.5 + 8 * 0.1 + unpickle * 4, 3)
    # a core's quarter just before the loop: 8 runnable (itself one) become 7 + 2 workers for the 2 cores; the share
    # of the parent's whole life (its first seconds shared with the probe's supervisor) is not what counts
    busy = e | {"num_workers": 2, "share_now": 0.25, "cpu_share": 0.1}
    assert predicted_start_s(busy, "spawn") == round(2 * 0.1 / (2 / 8) + (1.5 + unpickle) / (2 / 9), 3)
    # a pickle past the pipe's buffer: the parent waits for each worker to read its own, so they start in turn
    serial = busy | {"pickled_bytes": 4 * MiB}
    assert predicted_start_s(serial, "spawn") == round(2 * (0.1 + 1.5 + unpickle) / (2 / 8), 3)
    # 128 MiB of arrays counted by length: copied into each pickle by the parent, out of the pipe by the worker
    arrays = serial | {"buffer_bytes": 128 * MiB, "pickle_cpu_s": 0.0}
    parent, worker = PARENT_COPY_S_PER_GIB / 8, 1.5 + WORKER_COPY_S_PER_GIB / 8
    assert predicted_start_s(arrays, "spawn") == round(2 * (parent + worker) / (2 / 8), 3)


def test_a_run_recorded_before_the_cpu_readings_is_predicted_from_its_wall_times() -> None:
    e = event([PICKLES], cpu_share=0.5)  # imports_s 1.5, pickle_s 0.1: half of it was CPU
    assert start_work_s(e, "spawn") == round(INTERPRETER_START_S + 1.5 * 0.5 + 0.1 * 0.5 * UNPICKLE_PER_PICKLE, 4)
