"""The verdict and the order by cause (report/verdict.py), on the findings of a real OOM-killed run and on small
lists for the other ways a cause explains a death or a hang."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.report.verdict import judge

FIXTURE = Path(__file__).parent.parent / "fixtures" / "findings" / "oom_kill_cow_growth.json"


def _finding(code: str, severity: str, evidence: dict[str, Any] | None = None, loader_id: int | None = 0) -> Finding:
    return Finding(code, severity, f"{code} title", "detail", f"{code} fix", evidence or {}, loader_id)


def test_copy_on_write_that_explains_an_oom_kill_leads_as_an_error_and_its_symptoms_follow_it():
    # a real run: a list-of-dicts dataset in a 450 MiB memory cgroup, the kernel killed worker 1; as the analyzers
    # gave them, cow-growth was a warning 4th, under worker-killed, script-error and too-many-workers
    recorded = json.loads(FIXTURE.read_text())["findings"]
    assert [(f["code"], f["severity"]) for f in recorded][:4] == [
        ("worker-killed", "error"), ("script-error", "error"), ("too-many-workers", "error"), ("cow-growth", "warning"),
    ]  # fmt: skip
    ordered, verdict = judge([Finding(**f) for f in recorded])
    assert [(f.code, f.severity, f.explained_by) for f in ordered] == [
        ("cow-growth", "error", None),
        ("worker-killed", "error", "cow-growth"),
        ("script-error", "error", "worker-killed"),  # torch re-raising the same death in the script
        ("too-many-workers", "error", "cow-growth"),  # no worker fits the memory the copies take
        ("input-bound", "warning", None),
    ]
    assert ordered[0].severity_reason == (
        "raised from warning: it explains the kernel's OOM kill of loader 0 worker 1 (worker-killed)"
    )
    assert all(f.severity_reason is None for f in ordered[1:])
    assert verdict is not None and verdict["code"] == "cow-growth" and verdict["severity"] == "error"
    assert "152% of the 450.0 MiB cgroup limit" in verdict["sentence"]
    assert verdict["sentence"].endswith(
        "; this explains the kernel's OOM kill of loader 0 worker 1 (worker-killed), the script's RuntimeError "
        "(script-error) and that only 0 of 2 workers fit the memory left (too-many-workers)."
    )
    assert verdict["fix"] == next(f["fix"] for f in recorded if f["code"] == "cow-growth")
    assert "PackedRecords(self.samples)" in verdict["fix"]
    assert verdict["explains"] == ["worker-killed", "script-error", "too-many-workers"]


def test_the_scripts_error_restates_a_worker_death_in_either_of_torchs_words():
    killed = _finding("worker-killed", "error", {"cause": "oom", "signal": "SIGKILL", "pids": [2081]})
    for message in ("DataLoader worker (pid 2081) is killed by signal: Killed. ",
                    "DataLoader worker (pid(s) 2081) exited unexpectedly"):  # fmt: skip
        error = _finding("script-error", "error", {"type": "RuntimeError", "message": message}, loader_id=None)
        assert [(f.code, f.explained_by) for f in judge([killed, error])[0]] == [
            ("worker-killed", None), ("script-error", "worker-killed"),
        ]  # fmt: skip
    other = _finding("script-error", "error", {"type": "RuntimeError", "message": "DataLoader worker (pid(s) 20810)"})
    assert judge([killed, other])[0][1].explained_by is None  # another pid


def test_a_worker_killed_by_something_else_is_not_blamed_on_memory_growth():
    growth = _finding("cow-growth", "warning")
    killed = _finding("worker-killed", "error", {"cause": "external-kill", "signal": "SIGKILL", "pids": [7]})
    ordered, verdict = judge([killed, growth])
    assert [(f.code, f.severity, f.explained_by) for f in ordered] == [
        ("worker-killed", "error", None), ("cow-growth", "warning", None),
    ]  # fmt: skip
    assert verdict is not None and verdict["code"] == "worker-killed" and verdict["explains"] == []


def test_a_full_dev_shm_leads_the_bus_error_it_caused():
    killed = _finding("worker-killed", "error", {"cause": "bus", "signal": "SIGBUS", "pids": [9], "worker_id": 1})
    exhausted = _finding("shm-exhausted", "error", {"cause": "shm", "pids": [9]})
    pressure = _finding("shm-pressure", "warning", loader_id=None)
    ordered, verdict = judge([killed, exhausted, pressure])
    assert [(f.code, f.severity, f.explained_by) for f in ordered] == [
        ("shm-pressure", "error", None),
        ("shm-exhausted", "error", "shm-pressure"),
        ("worker-killed", "error", "shm-exhausted"),  # the bus error is how a full /dev/shm kills a worker
    ]
    assert verdict is not None and verdict["code"] == "shm-pressure"
    assert verdict["sentence"].endswith(
        "this explains the full /dev/shm (shm-exhausted) and the bus error that killed loader 0 worker 1 "
        "(worker-killed)."
    )


def test_threads_alive_at_fork_lead_the_hang_of_a_worker_that_inherited_their_lock():
    hang = _finding("worker-hang", "error", {"cause": "fork-lock", "worker_id": 0})
    fork = _finding("fork-hazard", "warning")
    slow = _finding("slow-start", "warning")
    ordered, verdict = judge([hang, fork, slow])
    assert [(f.code, f.severity, f.explained_by) for f in ordered] == [
        ("fork-hazard", "error", None), ("worker-hang", "error", "fork-hazard"), ("slow-start", "warning", None),
    ]  # fmt: skip
    assert verdict is not None and verdict["code"] == "fork-hazard"
    # a hang with another cause (a read that never returns) is not put on the threads
    other = _finding("worker-hang", "error", {"cause": "blocked-read", "worker_id": 0})
    assert [f.code for f in judge([other, fork])[0]] == ["worker-hang", "fork-hazard"]


def test_findings_that_explain_nothing_keep_their_order_by_severity_and_notes_alone_make_no_verdict():
    ordered, verdict = judge([_finding("input-bound", "warning"), _finding("slow-start", "info")])
    assert [f.code for f in ordered] == ["input-bound", "slow-start"] and verdict is not None
    assert verdict == {
        "code": "input-bound", "severity": "warning", "loader_id": 0, "sentence": "input-bound title.",
        "fix": "input-bound fix", "explains": [],
    }  # fmt: skip
    assert judge([_finding("slow-start", "info")])[1] is None
    assert judge([]) == ([], None)


def test_the_training_process_killed_by_the_oom_killer_is_a_death_the_memory_cause_explains():
    from dlprobe.analysis.findings.script import find_run_problems
    from tests.unit.fakes import loader, parent, run

    def killed(pid: int, signal: str | None = "SIGKILL") -> list[Finding]:
        r = run([loader()], [parent(200 * 1024 * 1024, pid=7)])
        r.result.update({"exit_code": 137 if signal else 0, "signal": signal})
        r.system.cgroup_limit = 500 * 1024 * 1024
        line = f"Memory cgroup out of memory: Killed process {pid}"
        r.kernel = {"kills": [{"pid": pid, "cgroup": True, "line": line}]}
        return [f for f in find_run_problems(r) if f.code == "script-killed"]

    [death] = killed(7)
    assert death.severity == "error" and death.evidence["cause"] == "oom" and death.evidence["pid"] == 7
    assert "OOM killer killed the training process (pid 7, SIGKILL)" in death.title and "500.0 MiB" in death.title
    assert killed(8) == [] and killed(7, signal=None) == []  # another process's kill; no signal ended the script
    ordered, verdict = judge([_finding("cow-growth", "warning"), death])
    assert verdict is not None and verdict["code"] == "cow-growth" and verdict["severity"] == "error"
    assert ordered[1].code == "script-killed" and ordered[1].explained_by == "cow-growth"


def test_a_shared_handle_leads_the_worker_error_whose_sample_loads_alone_and_a_bad_sample_stays_its_own():
    error = _finding("worker-error", "error", {"exception": "BadZipFile", "sample_alone": "loads", "worker_id": 0})
    shared = _finding("shared-handle", "warning", {"error_type": "BadZipFile"})
    ordered, verdict = judge([error, shared])
    assert [(f.code, f.explained_by) for f in ordered] == [("shared-handle", None), ("worker-error", "shared-handle")]
    assert verdict is not None and verdict["code"] == "shared-handle"
    # a sample that fails alone is the sample's, whatever the dataset holds
    bad = _finding("bad-sample", "error", {"exception": "BadZipFile", "sample_alone": "fails", "worker_id": 0})
    assert judge([bad, shared])[1]["code"] == "bad-sample"  # type: ignore[index]


def test_descriptors_at_their_limit_lead_the_main_processs_eof_error_and_the_workers_too_many_open_files():
    leak = _finding("fd-leak", "error", {"hit_limit_pids": [7]})
    eof = _finding("script-error", "error", {"type": "EOFError", "message": ""}, loader_id=None)
    emfile = _finding("worker-error", "error", {"error": "OSError: [Errno 24] Too many open files", "worker_id": 1,
                                               "pid": 7})  # fmt: skip
    ordered, verdict = judge([eof, emfile, leak])
    assert [(f.code, f.explained_by) for f in ordered][0] == ("fd-leak", None)
    assert {f.code: f.explained_by for f in ordered[1:]} == {"script-error": "fd-leak", "worker-error": "fd-leak"}
    assert verdict is not None and verdict["code"] == "fd-leak"


def test_a_worker_hung_reading_a_socket_the_workers_share_is_explained_by_the_shared_handle():
    handles = [{"fd": 7, "target": "socket:[4479821]", "kind": "socket", "attribute": "self.conn"}]
    shared = _finding("shared-handle", "info", {"handles": handles})  # no worker error tied to it: a hang has none
    hang = _finding("worker-hang", "error", {"cause": "blocked-read", "fd_target": "socket:[4479821]", "worker_id": 1})
    ordered, verdict = judge([hang, shared])
    assert [(f.code, f.explained_by, f.severity) for f in ordered] == [
        ("shared-handle", None, "error"), ("worker-hang", "shared-handle", "error")]  # fmt: skip
    assert verdict is not None and "the hang of loader 0 worker 1 reading `self.conn`" in verdict["sentence"]
    # a file path is not a connection: the same path read anew may be a hung mount's, not the shared offset's
    files = [{"fd": 8, "target": "/mnt/nfs/data.bin", "kind": "file", "attribute": "self.f"}]
    on_mount = _finding("worker-hang", "error", {"cause": "blocked-read", "fd_target": "/mnt/nfs/data.bin"})
    assert judge([on_mount, _finding("shared-handle", "info", {"handles": files})])[1]["code"] == "worker-hang"  # type: ignore[index]
    # a read on a socket of its own (opened in the worker) is not the shared one's
    own = _finding("worker-hang", "error", {"cause": "blocked-read", "fd_target": "socket:[5550001]", "worker_id": 1})
    assert judge([own, shared])[1]["code"] == "worker-hang"  # type: ignore[index]
