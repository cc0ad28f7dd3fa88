"""Loading a run directory (tolerating a torn last line) and the exact terminal text of a summary."""

from __future__ import annotations

import json

from rich.console import Console

from dlprobe.analysis.report.build import build_report
from dlprobe.analysis.run.model import load_run
from dlprobe.render.terminal import finding_panel, run_summary


def _write_run(path):
    (path / "meta.json").write_text(json.dumps({"script": "t.py", "argv": ["--x"], "started_at": 100.0,
                                                "target_pid": 10, "machine": {}}))  # fmt: skip
    (path / "result.json").write_text(json.dumps({"exit_code": 0, "ended_at": 112.5}))
    events = [
        {"ev": "loader", "t": 101.0, "pid": 10, "loader": 0, "batch_size": 4, "num_workers": 1,
         "prefetch_factor": 2, "pin_memory": False, "persistent_workers": False,
         "dataset": {"type": "m.DS", "len": 8, "suspects": [], "est_bytes": 0}},
        {"ev": "start_method", "t": 101.0, "pid": 10, "loader": 0, "start_method": "fork"},
        {"ev": "epoch", "t": 101.5, "pid": 10, "loader": 0, "epoch": 0, "iter_s": 0.5,
         "workers": [{"worker_id": 0, "pid": 11, "memory": {"rss": 300, "uss": 100, "pss": 150, "swap": 0}}]},
        {"ev": "batches", "t": 103.0, "pid": 10, "loader": 0, "epoch": 0, "waits": [0.5, 0.0], "total": 2},
        {"ev": "epoch_end", "t": 106.0, "pid": 10, "loader": 0, "epoch": 0, "batches": 2},
    ]  # fmt: skip
    lines = [json.dumps(e) for e in events]
    (path / "events.jsonl").write_text("\n".join(lines) + '\n{"ev": "batc')  # torn by a kill
    samples = [
        {"k": "proc", "pid": 10, "ppid": 1, "comm": "python"},
        {"k": "proc", "pid": 11, "ppid": 10, "comm": "pt_data_worker"},
        {"k": "s", "t": 102.0, "p": {"10": {"rss": 2000, "uss": 1000, "pss": 1500, "swap": 0},
                                      "11": {"rss": 300, "uss": 200, "pss": 250, "swap": 0}},
         "shm": {"used": 10, "total": 1000}, "avail": 5000},
        {"k": "s", "t": 103.0, "p": {"10": {"rss": 2100}, "11": {"rss": 310}}, "avail": 4000},
    ]  # fmt: skip
    (path / "samples.jsonl").write_text("\n".join(json.dumps(s) for s in samples) + "\n")


def test_load_run_builds_loaders_workers_and_series(tmp_path):
    _write_run(tmp_path)
    run = load_run(tmp_path)
    [lo] = run.loaders
    assert lo.start_method == "fork" and lo.waits == [0.5, 0.0]
    [main] = [p for p in run.processes if p.role == "main"]
    [w] = run.workers(0)
    assert (main.pid, w.pid, w.worker_id) == (10, 11, 0)
    # the hooks' reading at worker start comes first, then the supervisor's
    assert w.series.uss == [100, 200, None]
    assert w.series.rss == [300, 300, 310]
    assert run.system.shm_total == 1000


def test_a_worker_s_own_reading_at_its_start_comes_before_the_hooks_one(tmp_path):
    # The worker read itself before the user's worker_init_fn (uss 40); the main process read it after iter(),
    # on a busy machine once the worker_init_fn had loaded a table (uss 100): growth counts from the first.
    _write_run(tmp_path)
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('\n{"ev": "worker_start", "t": 101.2, "pid": 11, "loader": 0, "worker_id": 0, '
                '"memory": {"rss": 250, "uss": 40, "pss": 90, "swap": 0}}\n')  # fmt: skip
    run = load_run(tmp_path)
    [w] = run.workers(0)
    assert w.series.t[:2] == [101.2, 101.5] and w.series.uss == [40, 100, 200, None]


def test_summary_text_at_fixed_width(tmp_path):
    _write_run(tmp_path)
    run = load_run(tmp_path)
    report = build_report(run, [])
    text = _text(run_summary(report, verbose=True), 100)
    processes = [
        "│ main              │  10 │  2.1 KiB │    1000 B │   1000 B │  1000 B │  1.5 KiB │",
        "│ loader 0 worker 0 │  11 │    310 B │     100 B │    200 B │   200 B │    250 B │",
    ]
    expected_lines = [
        "dlprobe t.py --x  exit code 0, 12.5s",
        "│      0 │ DS      │   8 │     4 │       1 │ fork  │ prefetch=2 │       2 │  20% │     1.00s │",
        *processes,
        "No problems found.",
    ]
    for line in expected_lines:
        assert line in text.splitlines(), f"missing line: {line!r}\n{text}"
    # by default a screen: the memory of every process is under --verbose (and in report.json, on the page)
    brief = _text(run_summary(report), 100).splitlines()
    assert [line for line in expected_lines if line not in brief] == processes


def _text(renderable, width: int) -> str:
    console = Console(width=width, color_system=None, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_a_worker_line_without_a_reading_says_not_measured_never_a_placeholder():
    row = {"pid": 22037, "worker_id": 0, "uss_start_bytes": None, "uss_peak_bytes": 72 * 2**20,
           "uss_growth_bytes": 61 * 2**20, "pss_growth_bytes": None, "rss_growth_bytes": None, "cow_bytes": 0,
           "anon_growth_bytes": None, "pss_file_growth_bytes": 0, "pss_shmem_growth_bytes": None}  # fmt: skip
    finding = {"severity": "warning", "code": "cow-growth", "title": "t", "detail": "d", "fix": "f",
               "evidence": {"workers": [row]}}  # fmt: skip
    text = " ".join(_text(finding_panel(finding), 200).split())
    assert "worker 0 (pid 22037): USS peak 72.0 MiB (+61.0 MiB), PSS not measured, RSS not measured; " in text
    assert "new anonymous not measured" in text and "shm not measured" in text
    assert " - " not in text and "+-" not in text and "+not" not in text


def test_a_worker_line_names_only_the_readings_its_finding_carries():
    # too-many-workers' rows hold USS only: PSS and RSS were not asked for there, not unmeasured
    row = {"worker_id": 1, "pid": 22038, "uss_peak_bytes": 72 * 2**20, "uss_growth_bytes": 10 * 2**20}
    finding = {"severity": "error", "code": "too-many-workers", "title": "t", "detail": "d", "fix": "f",
               "evidence": {"workers": [row]}}  # fmt: skip
    text = " ".join(_text(finding_panel(finding), 200).split())
    assert "worker 1 (pid 22038): USS peak 72.0 MiB (+10.0 MiB)" in text and "not measured" not in text


def test_a_number_and_its_unit_stay_on_one_line_of_a_box():
    title = "Workers grew by " + "+99.3 MiB, " * 12 + "then stayed for 12 s and 3 min"
    finding = {"severity": "warning", "code": "cow-growth", "title": title, "detail": "d", "fix": "f", "evidence": {},
               "loader_id": None}  # fmt: skip
    for width in range(30, 90):
        lines = _text(finding_panel(finding), width).splitlines()
        # no line of the box ends on a bare number, nor starts its text with a unit
        assert not any(line.rstrip(" │").endswith(("+99.3", " 12", " 3")) for line in lines), (width, lines)
        assert not any(line.lstrip("│ ").startswith(("MiB", "s ", "min")) for line in lines), (width, lines)
    assert "+99.3 MiB" in _text(finding_panel(finding), 60)  # the space is a plain one again once wrapped


def test_the_hand_over_of_each_batch_is_read_alongside_its_wait_and_dropped_where_a_chunk_lacks_it(tmp_path):
    _write_run(tmp_path)
    events = (tmp_path / "events.jsonl").read_text().splitlines()[:-3]  # loader, start method, epoch: no batches
    chunk = {"ev": "batches", "t": 103.0, "pid": 10, "loader": 0, "epoch": 0, "total": 2}
    timed = [chunk | {"waits": [0.5, 0.1], "handovers": [0.01, 0.02]}, chunk | {"waits": [0.1], "handovers": [0.03]}]
    (tmp_path / "events.jsonl").write_text("\n".join(events + [json.dumps(e) for e in timed]) + "\n")
    [epoch] = load_run(tmp_path).loaders[0].epochs
    assert epoch.handovers == [0.01, 0.02, 0.03] and epoch.waits == [0.5, 0.1, 0.1]
    untimed = timed + [chunk | {"waits": [0.1]}]  # a chunk from a probe that did not time it: no partial sum
    (tmp_path / "events.jsonl").write_text("\n".join(events + [json.dumps(e) for e in untimed]) + "\n")
    assert load_run(tmp_path).loaders[0].epochs[0].handovers is None


def test_the_key_numbers_are_keys_of_their_codes_evidence_and_fit_one_line():
    import typing

    from dlprobe.analysis.evidence import schema as evidence_schema
    from dlprobe.analysis.evidence.schema import EVIDENCE_BY_CODE, KEY_EVIDENCE
    from dlprobe.render.terminal import key_numbers

    for code, keys in KEY_EVIDENCE.items():
        known = typing.get_type_hints(EVIDENCE_BY_CODE[code], vars(evidence_schema))
        assert set(keys) <= set(known), (code, set(keys) - set(known))
    finding = {"severity": "warning", "code": "cow-growth", "title": "t", "detail": "d", "fix": "f",
               "evidence": {"workers": [], "total_bytes": 45 * 2**20, "projected_total_bytes": 684 * 2**20,
                            "limit_bytes": None, "gc_at_fork": {"enabled": True}}}  # fmt: skip
    assert key_numbers(finding) == "total_bytes: 45.0 MiB \u00b7 projected_total_bytes: 684.0 MiB"
    # a code without key numbers of its own: its first two scalar entries
    other = {**finding, "code": "some-code", "evidence": {"rows": [1, 2], "a_s": 1.5, "b": "x", "c": 3}}
    assert key_numbers(other) == "a_s: 1.5 \u00b7 b: x"


def test_a_note_gives_its_fix_in_one_sentence_by_default_and_a_warning_in_full():
    from dlprobe.render.terminal import finding_brief

    fix = "DataLoader(..., prefetch_factor=4). More workers will not help: e.g. the wait is the hand-over."
    note = {"code": "input-bound", "severity": "info", "title": "t", "detail": "", "fix": fix, "evidence": {}}
    assert "fix: DataLoader(..., prefetch_factor=4). (more: --verbose)" in _text(finding_brief(note), 120)
    warning = {**note, "severity": "warning"}
    assert "More workers will not help: e.g. the wait is the hand-over." in _text(finding_brief(warning), 120)
    one = {**note, "fix": "profile the start-up (`py-spy record -o start.svg -- python train.py`)."}
    assert "(more: --verbose)" not in _text(finding_brief(one), 120)
