"""A worker's readings after its training process died are teardown: cut from its series, never read as growth."""

from __future__ import annotations

import json
from pathlib import Path

from dlprobe.analysis.findings.memory import find_cow_growth
from dlprobe.analysis.findings.script import find_run_problems
from dlprobe.analysis.run.model import ProcessRecord, Series, load_run
from dlprobe.analysis.run.teardown import cut_teardown
from tests.unit.fakes import MiB, loader, parent, run, worker


def _kinds(uss: list[int], anon: int = 300 * MiB) -> Series:
    """A worker read every second from t=100 whose private dirty pages are `uss` while its anonymous memory is flat:
    what copy-on-write looks like, and what a lone survivor mapping its dead parent's pages looks like too."""
    n = len(uss)
    s = Series(t=[100.0 + i for i in range(n)], rss=[anon] * n, uss=list(uss), pss=list(uss), swap=[0] * n)
    s.anon, s.private_dirty, s.private_clean = [anon] * n, list(uss), [0] * n
    s.pss_anon, s.pss_file, s.pss_shmem = list(uss), [0] * n, [0] * n
    return s


def _killed_run(worker_uss: list[list[int]], main_gone: float | None = 106.0):
    workers = [worker(11 + i, i, _kinds(u)) for i, u in enumerate(worker_uss)]
    for w in workers:
        w.ppid = 1
    r = run([loader(num_workers=len(workers))], [parent(600 * MiB), *workers])
    r.meta["target_pid"] = 1
    if main_gone is not None:
        r.gone[1] = main_gone
    return r


FLAT_THEN_ALONE = [20 * MiB] * 6 + [610 * MiB] * 4  # 20 MiB while the parent lived; its pages alone after it died


def test_readings_from_the_parents_death_on_are_cut_and_the_cut_recorded():
    r = _killed_run([FLAT_THEN_ALONE, FLAT_THEN_ALONE])
    cut_teardown(r)
    for w in r.workers():
        assert w.series.t == [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]
        assert max(w.series.uss) == 20 * MiB and len(w.series.private_dirty) == 6  # every list cut alike
        assert (w.teardown_from, w.teardown_parent, w.teardown_readings) == (106.0, 1, 4)
    main = next(p for p in r.processes if p.role == "main")
    assert len(main.series.t) == 3 and main.teardown_from is None  # the main process's own readings stay


def test_a_worker_whose_parent_lived_is_not_cut():
    r = _killed_run([FLAT_THEN_ALONE], main_gone=None)
    cut_teardown(r)
    [w] = r.workers()
    assert len(w.series.t) == 10 and w.teardown_from is None and w.teardown_readings == 0


def test_the_first_death_of_the_loaders_process_and_the_workers_own_parent_cuts():
    r = _killed_run([FLAT_THEN_ALONE])
    [w] = r.workers()
    extra = ProcessRecord(7, "other", comm="python")  # a forkserver between the training process and the worker
    r.processes.append(extra)
    w.ppid = 7
    r.gone[7] = 103.5
    cut_teardown(r)
    assert w.series.t == [100.0, 101.0, 102.0, 103.0] and (w.teardown_from, w.teardown_parent) == (103.5, 7)


def test_teardown_never_reads_as_copy_on_write():
    uncut = _killed_run([FLAT_THEN_ALONE, FLAT_THEN_ALONE])
    assert find_cow_growth(uncut), "the fake must be what the unfixed report misread as copy-on-write"
    r = _killed_run([FLAT_THEN_ALONE, FLAT_THEN_ALONE])
    cut_teardown(r)
    assert find_cow_growth(r) == []


def test_copy_on_write_before_the_death_keeps_its_numbers_and_names_the_cut():
    growing = [20 * MiB + i * 40 * MiB for i in range(6)] + [900 * MiB] * 4  # 20 -> 220 MiB, then teardown
    r = _killed_run([growing, growing])
    cut_teardown(r)
    [finding] = [f for f in find_cow_growth(r) if f.code == "cow-growth"]
    rows = finding.evidence["workers"]
    assert max(row["cow_bytes"] for row in rows) == 200 * MiB  # what it copied while the parent lived
    assert max(row["uss_peak_bytes"] for row in rows) == 220 * MiB
    assert "training process (pid 1) died 6.0 s into the run are teardown: left out" in finding.detail
    ev = finding.evidence
    assert (ev["teardown_from_s"], ev["teardown_pid"], ev["teardown_readings"]) == (6.0, 1, 8)


def test_the_oom_killed_training_process_names_the_cut():
    r = _killed_run([FLAT_THEN_ALONE])
    r.result = {"exit_code": 137, "signal": "SIGKILL", "ended_at": 112.0}
    r.kernel = {"kills": [{"pid": 1, "line": "Killed process 1 (python)", "cgroup": "/job"}]}
    cut_teardown(r)
    [killed] = [f for f in find_run_problems(r) if f.code == "script-killed"]
    assert "are teardown: left out (4 readings of 1 worker;" in killed.detail
    assert killed.evidence["teardown_pid"] == 1


def test_the_oom_killed_training_process_that_grew_is_named_as_what_grew():
    # a user's loop kept 20 MB arrays per batch in a 600 MiB cgroup: the only finding was this one, and its fix
    # pointed at memory findings there were none of
    r = _killed_run([[9 * MiB] * 6])
    r.processes[0] = ProcessRecord(1, "main", comm="python", series=_kinds([53 * MiB, 150 * MiB, 280 * MiB, 389 * MiB]))
    r.result = {"exit_code": 137, "signal": "SIGKILL", "ended_at": 112.0}
    r.kernel = {"kills": [{"pid": 1, "line": "Killed process 1 (python)", "cgroup": "/job"}]}
    [killed] = [f for f in find_run_problems(r) if f.code == "script-killed"]
    assert "the training process (pid 1) grew the most: its private memory (USS) rose from 53.0 MiB to 389.0 MiB; " \
           "its 1 worker(s) held at most 9.0 MiB each" in killed.detail  # fmt: skip
    assert killed.fix.startswith("Make the training process hold less: its own memory grew, not the workers'")
    assert killed.evidence["grew_most"]["role"] == "main"
    flat = _killed_run([[9 * MiB] * 6])  # nothing grew: the fix points at nothing it cannot name
    flat.result, flat.kernel = r.result, r.kernel
    [plain] = [f for f in find_run_problems(flat) if f.code == "script-killed"]
    assert "grew_most" not in plain.evidence and plain.fix.startswith("Make the job use less memory")


def test_load_run_cuts_at_the_main_process_gone_record(tmp_path: Path):
    (tmp_path / "meta.json").write_text(json.dumps({"script": "t.py", "argv": [], "started_at": 100.0,
                                                    "target_pid": 10, "machine": {}}))  # fmt: skip
    (tmp_path / "result.json").write_text(json.dumps({"exit_code": 137, "signal": "SIGKILL", "ended_at": 112.0}))
    events = [
        {"ev": "loader", "t": 101.0, "pid": 10, "loader": 0, "batch_size": 4, "num_workers": 1,
         "prefetch_factor": 2, "pin_memory": False, "persistent_workers": False,
         "dataset": {"type": "m.DS", "len": 8, "suspects": [], "est_bytes": 0}},
        {"ev": "epoch", "t": 101.5, "pid": 10, "loader": 0, "epoch": 0, "iter_s": 0.5,
         "workers": [{"worker_id": 0, "pid": 11, "memory": None}]},
    ]  # fmt: skip
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    samples = [
        {"k": "proc", "pid": 10, "ppid": 1, "comm": "python"},
        {"k": "proc", "pid": 11, "ppid": 10, "comm": "pt_data_worker"},
        {"k": "s", "t": 102.0, "p": {"10": {"rss": 900 * MiB, "uss": 600 * MiB}, "11": {"rss": 300 * MiB,
                                                                                       "uss": 20 * MiB}}},
        {"k": "gone", "pid": 10, "t": 103.0},
        {"k": "s", "t": 103.0, "p": {"11": {"rss": 300 * MiB, "uss": 610 * MiB}}},
        {"k": "s", "t": 104.0, "p": {"11": {"rss": 300 * MiB, "uss": 610 * MiB}}},
    ]  # fmt: skip
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    [w] = load_run(tmp_path).workers()
    assert w.series.t == [102.0] and w.series.uss == [20 * MiB]
    assert (w.teardown_from, w.teardown_parent, w.teardown_readings) == (103.0, 10, 2)
