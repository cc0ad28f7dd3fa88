"""worker-start-failed and start-method-forced on synthetic runs; the pickle walk that names the attribute; compare."""

from __future__ import annotations

import functools
import threading
from typing import Any

from dlprobe.analysis.findings.start_failure import find_start_method_forced, find_worker_start_failures
from dlprobe.analysis.report.compare import compare
from dlprobe.in_training.start_failures import blame, worker_roots
from tests.unit.fakes import loader, run, series, worker

MiB = 1024 * 1024


class _Holder:
    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


def _double(x: int) -> int:
    return 2 * x


def test_blame_names_the_lambda_under_the_dataset() -> None:
    def build() -> _Holder:
        return _Holder(records=[1, 2, 3], transforms=[_double, lambda x: x + 1])

    found = blame([("dataset", build()), ("collate_fn", _double)])
    assert found is not None
    assert found.path == "dataset.transforms[1]"
    assert found.reason == "a lambda (defined in build)"


def test_blame_names_a_local_class_a_lock_and_a_partial_argument() -> None:
    class Local:
        pass

    lock_found = blame([("dataset", _Holder(guard=threading.Lock()))])
    assert lock_found is not None and lock_found.path == "dataset.guard"
    local_found = blame([("dataset", _Holder(item=Local()))])
    assert local_found is not None and local_found.path == "dataset.item" and "local class" in local_found.reason
    inner = functools.partial(_double, lambda: 0)
    partial_found = blame([("dataset", _Holder(fn=inner))])
    assert partial_found is not None and partial_found.path == "dataset.fn.args[0]"


def test_blame_is_none_when_everything_pickles_and_survives_a_cycle() -> None:
    holder = _Holder(records=list(range(10)), fn=_double)
    holder.me = holder
    assert blame([("dataset", holder), ("collate_fn", _double)]) is None
    cyclic = _Holder(fn=lambda: 1)
    cyclic.me = cyclic
    found = blame([("dataset", cyclic)])
    assert found is not None and found.path == "dataset.fn"


def test_worker_roots_leave_out_a_missing_worker_init_fn() -> None:
    fake = _Holder(dataset=1, collate_fn=_double)
    assert [name for name, _ in worker_roots(fake, None)] == ["dataset", "collate_fn"]
    assert [name for name, _ in worker_roots(fake, _double)][-1] == "worker_init_fn"


def _failed(**fields: Any) -> dict[str, Any]:
    return {"ev": "worker_start_failed", "t": 101.0, "pid": 1, "loader": 0, "start_method": "spawn", **fields}


def test_unpicklable_fires_with_the_attribute_and_only_once_per_loader() -> None:
    ev = _failed(kind="unpicklable", path="dataset.transform", object_type="function",
                 reason="a lambda (defined in main)",
                 error="AttributeError: Can't pickle local object 'main.<locals>.<lambda>'")  # fmt: skip
    findings = find_worker_start_failures(run([loader(start_method="spawn")], [], events=[ev, dict(ev)]))
    assert [f.code for f in findings] == ["worker-start-failed"]
    assert findings[0].evidence["attribute_path"] == "dataset.transform" and findings[0].severity == "error"
    assert "dataset.transform" in findings[0].title and "spawn" in findings[0].title


def test_main_guard_names_the_line_and_the_parents_loader_of_the_dead_workers() -> None:
    events = [_failed(pid=p, loader=3, kind="main-guard", file="/x/train.py", line=7, error="RuntimeError: ...")
              for p in (11, 12)]  # fmt: skip
    flat = series([100 * MiB] * 2, [120 * MiB] * 2)
    workers = [worker(11, 0, flat, loader_id=1), worker(12, 1, flat, loader_id=1)]
    findings = find_worker_start_failures(run([loader(1, start_method="spawn")], workers, events=events))
    assert len(findings) == 1
    assert findings[0].loader_id == 1  # the parent's number, not the one the re-running worker gave it
    assert findings[0].evidence["pids"] == [11, 12] and findings[0].evidence["line"] == 7
    assert "/x/train.py:7" in findings[0].detail


def test_nothing_fires_without_the_events() -> None:
    quiet = run(
        [loader()], [], events=[{"ev": "start_method", "t": 1.0, "pid": 1, "loader": 0, "start_method": "fork"}]
    )
    assert find_worker_start_failures(quiet) == [] and find_start_method_forced(quiet) == []


def test_forced_says_what_it_overrode_and_a_missing_thread_worker_once() -> None:
    events = [
        {"ev": "start_method_forced", "t": 1.0, "pid": 1, "loader": 0, "forced": "forkserver", "script_choice": "fork",
         "default": "fork", "applied": True},
        {"ev": "start_method_forced", "t": 1.0, "pid": 1, "loader": 1, "forced": "forkserver", "script_choice": None,
         "default": "fork", "applied": True},
    ]  # fmt: skip
    finding = find_start_method_forced(run([loader(), loader(1)], [], events=events))[0]
    assert finding.evidence["overridden"] == [{"loader": 0, "script_choice": "fork"}]
    assert "overridden" in finding.detail and "default: fork" in finding.detail
    assert finding.title.endswith("overriding the script's own fork (loader 0)")
    no_threads = "this torch (2.13.0) has no thread workers"
    events = [
        {"ev": "start_method_forced", "t": 1.0, "pid": 1, "loader": i, "forced": "thread", "script_choice": None,
         "default": "fork", "applied": False, "reason": no_threads}
        for i in (0, 1)
    ]  # fmt: skip
    finding = find_start_method_forced(run([loader(), loader(1)], [], events=events))[0]
    assert finding.title.count("no thread workers") == 1 and finding.detail.count("no thread workers") == 1


def _side(findings: dict[str, str]) -> Any:
    return {"run_dir": "r", "script": "s.py", "start_method_forced": None, "exit_code": 0, "duration_s": 1.0,
            "loaders": {}, "findings": findings}  # fmt: skip


def test_compare_lists_the_warnings_and_errors_only_one_run_has() -> None:
    a = _side({"slow-start": "info", "cow-growth": "warning"})
    b = _side({"worker-start-failed": "error", "cow-growth": "warning", "start-method-forced": "info"})
    result = compare(a, b)
    assert result["only_a"] == [] and result["only_b"] == ["worker-start-failed"]
