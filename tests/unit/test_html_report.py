"""report.html on synthetic runs: escaped user data, balanced markup, no network, and bad input named on the page."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from dlprobe.analysis import analyze
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.report.build import build_report
from dlprobe.analysis.report.downsample import downsample
from dlprobe.analysis.report.timeline import MAX_POINTS, timeline_from_run
from dlprobe.analysis.run.model import Epoch, RunData, Series, SystemSeries
from dlprobe.analysis.run.stderr_log import stderr_not_kept, stderr_tail
from dlprobe.commands.outputs import run_html_problem
from dlprobe.render.html import render_html
from dlprobe.render.svg import Chart, Line, Marker, chart_svg, flag_width, layout_flags
from tests.htmlpage import PLANT, parse_page
from tests.unit.fakes import MiB, loader, run, series, worker


def _hostile_run() -> RunData:
    """A leaky loader whose dataset path and the script's exception message carry markup."""
    grow = [10 * MiB + i * 10 * MiB for i in range(10)]
    workers = [worker(11, 0, series(grow, [300 * MiB] * 10)), worker(12, 1, series(grow, [300 * MiB] * 10))]
    main = worker(10, 0, series([200 * MiB] * 10, [400 * MiB] * 10))
    main.role, main.loader_id, main.worker_id = "main", None, None
    suspects = [{"attribute": f"self.paths {PLANT}", "type": "list[str]", "items": 10, "est_bytes": 300 * MiB}]
    lo = loader(suspects=suspects, est_bytes=300 * MiB, epochs=[Epoch(0, 101.0, 0.1, 109.0, 3, [0.5, 0.01, 0.02])])
    lo.config["dataset"]["type"] = f"/data/{PLANT}/set.Dataset"
    events = [
        {"ev": "epoch", "t": 101.1, "pid": 10, "loader": 0, "epoch": 0, "iter_s": 0.1,
         "workers": [{"pid": 11, "worker_id": 0}, {"pid": 12, "worker_id": 1}]},
        {"ev": "batches", "t": 105.0, "pid": 10, "loader": 0, "epoch": 0, "waits": [0.5, 0.01, 0.02]},
        {"ev": "script_error", "t": 109.5, "pid": 10, "type": "ValueError", "message": f"bad path {PLANT} \ufffd"},
    ]  # fmt: skip
    r = run([lo], [main, *workers], events=events)
    r.meta["argv"] = ["--data", PLANT]
    r.result = {"exit_code": 1, "ended_at": 110.0}
    r.gone = {11: 109.8}
    return r


def test_every_value_from_the_run_is_escaped_and_the_page_is_well_formed():
    r = _hostile_run()
    report = build_report(r, analyze(r))
    report["findings"].append(
        Finding("planted", "error", f"title {PLANT}", f"detail {PLANT}", f"fix `x = {PLANT}`", {"e": PLANT}).to_dict()
    )
    page = render_html(report, timeline_from_run(r))
    check = parse_page(page)
    assert "<script>" not in page.lower()
    assert {f["code"] for f in report["findings"]} <= check.codes
    assert "cow-growth" in check.codes
    text = "".join(check.text)
    # the planted markup reads back as text, in the verdict, the finding, the event list and the loaders table
    assert text.count(PLANT) >= 5
    assert "ValueError: bad path <script>" in text
    assert 'http-equiv="Content-Security-Policy"' in page
    assert "http://" not in page and "https://" not in page  # not even a namespace: nothing to resolve


def test_a_run_older_than_page_kinds_says_so_and_still_draws_memory():
    r = _hostile_run()
    for p in r.processes:
        for kind in ("pss_anon", "pss_file", "pss_shmem"):
            setattr(p.series, kind, [None] * len(p.series.t))
    page = render_html(build_report(r, analyze(r)), timeline_from_run(r))
    text = "".join(parse_page(page).text)
    assert "this run did not record it" in text
    assert "Memory per process: USS" in text


def test_a_run_that_died_before_any_sample_gets_a_page_that_says_what_is_missing():
    r = run([], [])
    r.result = {"exit_code": 1, "signal": "SIGKILL", "ended_at": 100.5}
    page = render_html(build_report(r, analyze(r)), timeline_from_run(r))
    text = "".join(parse_page(page).text)
    assert "What this page could not show" in text
    assert "no memory sample" in text
    assert "exit code 1 (SIGKILL)" in text


def test_a_section_that_fails_is_named_and_the_rest_of_the_page_stays(tmp_path):
    r = _hostile_run()
    report = build_report(r, analyze(r))
    report["loaders"] = "not a list"  # a damaged report must not cost the findings or the charts
    path = tmp_path / "report.html"
    run_html_problem(path, r, report)
    check = parse_page(path.read_text())
    text = "".join(check.text)
    assert "the loaders: AttributeError" in text
    assert "cow-growth" in check.codes


def test_a_run_that_cannot_be_read_into_a_timeline_still_gets_its_findings(tmp_path):
    r = _hostile_run()
    report = build_report(r, analyze(r))
    r.processes[0].series = None  # type: ignore[assignment]
    path = tmp_path / "report.html"
    run_html_problem(path, r, report)
    text = "".join(parse_page(path.read_text()).text)
    assert "the timeline: AttributeError" in text


def test_non_utf8_bytes_in_stderr_are_replaced_not_fatal(tmp_path):
    r = _hostile_run()
    r.path = tmp_path
    (tmp_path / "stderr.log").write_bytes(b"Traceback\n\xff\xfe " + PLANT.encode() + b"\n")
    r.stderr_tail = stderr_tail(tmp_path)  # as load_run reads it
    page = render_html(build_report(r, analyze(r)), timeline_from_run(r))
    text = "".join(parse_page(page).text)
    assert "\ufffd\ufffd " + PLANT in text


def test_a_stderr_left_on_a_terminal_is_said_not_kept_rather_than_shown_empty(tmp_path):
    r = _hostile_run()
    r.path = tmp_path  # no stderr.log: dlprobe does not sit between the script and its terminal
    r.result["stderr"] = {"kind": "terminal", "written_bytes": None, "kept_bytes": 0, "problem": None}
    r.stderr_tail = stderr_tail(tmp_path)
    r.stderr_not_kept = stderr_not_kept(r.result["stderr"])  # as load_run reads it
    text = " ".join(parse_page(render_html(build_report(r, analyze(r)), timeline_from_run(r))).text)
    assert "The script's stderr was a terminal, which dlprobe leaves to the script and does not copy" in text
    assert "The end of stderr.log" not in text


def test_a_long_run_is_downsampled_to_a_bounded_page_and_keeps_its_peaks():
    n = 36_000  # one hour at 10 Hz
    uss = [100 * MiB + (i % 50) * MiB for i in range(n)]
    uss[20_001] = 5000 * MiB  # one spike must survive downsampling
    s = Series(t=[100.0 + i * 0.1 for i in range(n)], rss=list(uss), uss=list(uss), pss=list(uss), swap=[0] * n)
    workers = [worker(11 + w, w, s) for w in range(8)]
    waits = [0.001 * (i % 7) for i in range(n)]
    events: list[dict[str, Any]] = [{"ev": "epoch", "t": 100.0 + e * 60, "pid": 1, "loader": 0, "epoch": e,
                                     "iter_s": 0.0} for e in range(60)]  # fmt: skip
    events += [{"ev": "batches", "t": 100.0 + i / 10, "pid": 1, "loader": 0, "epoch": 0, "waits": waits[i : i + 100]}
               for i in range(0, n, 100)]  # fmt: skip
    r = run([loader(epochs=[Epoch(0, 100.0, 0.0, None, n, waits)])], workers, events=events)
    timeline = timeline_from_run(r)
    assert all(len(p["uss"]) <= MAX_POINTS for p in timeline["processes"])
    assert max(y for _, y in timeline["processes"][0]["uss"]) == 5000
    assert len([e for e in timeline["events"] if "epoch" in e["what"]]) == 60  # every event is kept
    page = render_html(build_report(r, analyze(r)), timeline)
    parse_page(page)
    assert len(page.encode()) < 2 * 1024 * 1024


def test_downsample_keeps_first_last_min_and_max():
    pts = [(float(i), float((i * 37) % 101)) for i in range(10_000)]
    pts[5000] = (5000.0, 1e6)
    pts[7000] = (7000.0, -5.0)
    out = downsample(pts, 300)
    assert len(out) <= 300
    assert out[0] == pts[0] and out[-1] == pts[-1]
    assert (5000.0, 1e6) in out and (7000.0, -5.0) in out
    assert [x for x, _ in out] == sorted(x for x, _ in out)


def test_check_verdict_and_rules_are_shown_when_given():
    r = _hostile_run()
    check = {"exit_code": 1, "passed": False, "rules": [
        {"rule": "max_worker_uss_growth", "threshold": "50 MB", "observed": "90 MiB", "status": "fail",
         "message": f"worker 0 grew {PLANT}", "source": "--max-worker-uss-growth"}]}  # fmt: skip
    page = render_html(build_report(r, analyze(r)), timeline_from_run(r), check)
    text = "".join(parse_page(page).text)
    assert "dlprobe check: failed (exit code 1)" in text
    assert f"worker 0 grew {PLANT}" in text


def test_the_page_file_is_written_atomically(tmp_path: Path):
    r = _hostile_run()
    path = tmp_path / "report.html"
    run_html_problem(path, r, build_report(r, analyze(r)))
    assert path.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_tune_scan_and_triage_pages_escape_their_results_and_name_what_they_could_not_show():
    from dlprobe.render.html_results import render_scan_html, render_triage_html, render_tune_html

    trial = {"num_workers": 2, "prefetch_factor": 2, "status": "ok", "samples_per_s": 900.0, "key": PLANT}
    tune = {"script": PLANT, "argv": [], "trials": [trial], "recommended": {"num_workers": 2}}
    text = parse_page(render_tune_html(tune)).all_text
    assert "recommended: num_workers=2" in text and PLANT in text and "Throughput by num_workers" in text
    scan = {"script": "s.py", "argv": [], "unit": "index", "scanned": 10, "complete": True,
            "bad": [{"index": 3, "kind": "exception", "detail": f"ValueError: {PLANT}"}], "loaders": 7}  # fmt: skip
    text = parse_page(render_scan_html(scan, 1)).all_text
    assert "1 bad samples of 10 checked" in text and f"ValueError: {PLANT}" in text
    assert "the loaders: TypeError" in text  # a damaged result still gives a page that says what it could not show
    triage = {"failure_found": True, "log": {"path": PLANT}, "findings": [Finding("bad-sample", "error", PLANT, "d",
              "f", {"message": PLANT}).to_dict()]}  # fmt: skip
    checked = parse_page(render_triage_html(triage))
    assert checked.codes == {"bad-sample"} and PLANT in checked.all_text


def test_a_multi_rank_report_shows_its_ranks_as_a_table():
    r = _hostile_run()
    report = build_report(r, analyze(r))
    report["ranks"] = [{"rank": 0, "host": PLANT, "exit_code": 0}, {"rank": 1, "host": "b", "exit_code": -9}]
    node = {"node": 0, "pss_peak": 1300 * MiB, "memory_limit": 4096 * MiB, "workers_that_fit_memory": 12,
            "pss_total": {"t": [0.5, 1.0], "bytes": [987654321, 2]}}  # fmt: skip
    report["job"] = {"ranks": 2, "nodes": [node]}
    for i, (p, lo) in enumerate(zip(report["processes"][:2], [*report["loaders"], {}], strict=False)):
        p["rank"] = lo["rank"] = f"rank {i}"
    text = parse_page(render_html(report, timeline_from_run(r))).all_text
    assert "Job and ranks" in text and PLANT in text and "-9" in text
    # the node's memory in human units, a count left a count, its series left to the chart and report.json
    assert "1.3 GiB" in text and "4.0 GiB" in text and "12 B" not in text
    assert "987654321" not in text and "941.9 MiB" not in text
    assert "rank 0 main" in text and "rank 1 loader 0 worker 0" in text  # each rank has its own "main"
    loaders = re.search(r'<section id="loaders">.*?</section>', render_html(report))
    assert loaders and "<th scope=col>rank</th>" in loaders.group(0) and "<td>rank 0</td>" in loaders.group(0)


def test_a_run_without_stacks_says_why_and_a_loader_error_names_its_cause():
    from dlprobe.analysis.run.stackfile import StackProfile

    r = _hostile_run()
    r.stacks = StackProfile(status="missing", error=f"no py-spy {PLANT}")
    r.events.append({"ev": "loader_error", "t": 109.0, "pid": 10, "loader": 0, "type": "RuntimeError",
                     "message": "Caught ValueError in DataLoader worker", "cause": f"ValueError: {PLANT}"})  # fmt: skip
    text = parse_page(render_html(build_report(r, analyze(r)), timeline_from_run(r))).all_text
    assert f"the stack sampler recorded nothing (missing: no py-spy {PLANT})" in text
    assert f"loader 0 raised RuntimeError: ValueError: {PLANT}" in text


def _report(exit_code: int | None, *severities: str, signal: str | None = None) -> dict[str, Any]:
    findings = [Finding(f"code-{i}", sev, "t", "d", "f", {}).to_dict() for i, sev in enumerate(severities)]
    system = dict.fromkeys(("shm_total", "shm_peak", "available_min", "cgroup_limit", "cgroup_peak", "pss_total_peak"))
    return {"schema_version": 3, "dlprobe_version": "0", "run_dir": "run", "script": "train.py", "argv": [],
            "exit_code": exit_code, "signal": signal, "duration_s": None, "machine": {}, "loaders": [],
            "processes": [], "system": system, "findings": findings, "probe_cost": None, "shm_removed": [],
            "orphans_stopped": [], "read_problems": [], "attached": None}  # fmt: skip


@pytest.mark.parametrize(
    ("exit_code", "signal", "severities", "colour", "word"),
    [
        (0, None, (), "ok", "Healthy"),
        (0, None, ("info",), "ok", "Healthy"),
        (0, None, ("info", "warning"), "warning", "Needs a look"),  # the demo's leaky run: exit 0, a warning
        (0, None, ("warning", "error"), "error", "Problem found"),
        (1, None, (), "error", "Failed"),
        (1, None, ("warning",), "error", "Failed"),
        (-9, "SIGKILL", ("info",), "error", "Failed"),
        (None, None, (), "warning", "Needs a look"),
        (None, None, ("error",), "error", "Problem found"),
    ],
)
def test_the_verdict_is_coloured_by_the_most_severe_finding_then_the_exit_code(
    exit_code, signal, severities, colour, word
):
    page = render_html(_report(exit_code, *severities, signal=signal))
    match = re.search(r'<section id="verdict" class="verdict (\w+)">.*?<p class="status (\w+)">([^<]*)</p>', page)
    assert match, page[:2000]
    assert match.group(1) == match.group(2) == colour
    assert match.group(3).startswith(f"{word} \u2014 ")
    # the codes that make it so are named, the most severe first
    named = [f"code-{i}" for i, s in sorted(enumerate(severities), key=lambda x: x[1] != "error") if s != "info"]
    if named:
        assert f"({', '.join(named)})" in match.group(3)


def _flag_boxes(svg: str) -> list[tuple[float, float, float, float, str]]:
    """Each numbered flag of a chart as (left, top, right, bottom, text): the label's box as drawn."""
    boxes = []
    for x, y, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="middle" class="mk"[^>]*>([^<]*)<', svg):
        half = flag_width(html.unescape(text)) / 2
        boxes.append((float(x) - half, float(y) - 10, float(x) + half, float(y), html.unescape(text)))
    return boxes


def _numbers(text: str) -> set[int]:
    if "\u2013" in text:
        first, last = text.split("\u2013")
        return set(range(int(first), int(last) + 1))
    return {int(n) for n in text.split(",")}


@pytest.mark.parametrize(
    "times",
    [
        [10.0, 10.2, 10.4],  # "1", "2", "3" a few pixels apart: once printed on top of each other as "123"
        [10.0, 10.3, 10.3, 10.6, 50.0, 50.1],
        [5.0] * 9 + [5.2, 5.4, 5.6, 5.8, 6.0] + [95.0, 95.1, 99.9, 100.0],  # a burst, and flags at the right edge
        [float(i) * 0.05 for i in range(30)],  # thirty events in 1.5 s of a 100 s run
    ],
)
def test_event_flags_close_together_never_overlap_and_every_event_keeps_its_number(times):
    markers = [Marker(t, f"event {i + 1}", "error" if i % 4 == 0 else "info") for i, t in enumerate(times)]
    svg = chart_svg(Chart("c", "MiB", [Line("l", [(0.0, 1.0), (100.0, 2.0)])], markers, x_range=(0.0, 100.0)))
    boxes = _flag_boxes(svg)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
            assert apart, f"flag {a[4]!r} overlaps flag {b[4]!r}"
        assert a[0] >= 0 and a[2] <= 900, f"flag {a[4]!r} is cut off at the chart's edge"
    shown = [n for box in boxes for n in _numbers(box[4])]
    assert sorted(shown) == list(range(1, len(times) + 1))  # each number once, on one flag


def test_flags_apart_enough_stay_single_and_a_pile_at_one_time_reads_as_a_range():
    apart = layout_flags([(100.0, 1, Marker(1, "a")), (104.0, 2, Marker(1.1, "b")), (300.0, 3, Marker(5, "c"))],
                         0, 900)  # fmt: skip
    assert [(f.text, f.row) for f in apart] == [("1", 0), ("2", 1), ("3", 0)]  # staggered, not merged
    pile = layout_flags([(100.0, n, Marker(1, f"m{n}", "error" if n == 5 else "info")) for n in range(1, 9)], 0, 900)
    assert [(f.text, f.severity) for f in pile] == [("1\u20138", "error")]  # coloured by its most severe event
    assert pile[0].labels == [f"m{n}" for n in range(1, 9)]  # the tooltip lists every event of the range
    # a burst too dense for the rows is one range, not digits scattered over them ("1 6 / 2 7 / 3–5")
    burst = layout_flags([(100.0 + 3 * n, n, Marker(n, "b")) for n in range(1, 8)] + [(400.0, 8, Marker(9, "c"))],
                         0, 900)  # fmt: skip
    assert [(f.text, f.row) for f in burst] == [("1\u20137", 0), ("8", 0)]


def test_the_cgroup_line_is_labelled_as_everything_in_the_cgroup_beside_the_jobs_own_memory():
    r = _hostile_run()
    r.meta["cgroup"] = "/sys/fs/cgroup/docker/abc"
    times = [100.0 + i for i in range(10)]
    r.system = SystemSeries(t=times, shm_used=[MiB] * 10, cgroup_usage=[2048 * MiB] * 10, cgroup_limit=4096 * MiB)
    page = render_html(build_report(r, analyze(r)), timeline_from_run(r))
    text = parse_page(page).all_text
    assert "the job's cgroup memory" not in text
    assert "Machine: /dev/shm use, the container's (cgroup's) memory and the job's own" in text
    legend = [html.unescape(item) for item in re.findall(r"</svg> ([^<]*)</li>", page)]
    assert "container/cgroup memory (all processes in /sys/fs/cgroup/docker/abc)" in legend
    assert "the job's own memory (sum of its processes' PSS)" in legend
    # side by side in the verdict: the job's peak (main 200 MiB + two workers at 100 MiB of PSS) and the cgroup's
    kv = re.findall(r"<th scope=row>([^<]*)</th><td>((?:[^<]|<wbr>)*)<", page)
    rows = {html.unescape(k): html.unescape(v.replace("<wbr>", "")) for k, v in kv}
    assert rows["the job's own memory"] == "peak 400.0 MiB (sum of its processes' PSS)"
    assert rows["container/cgroup memory"] == (
        "peak 2.0 GiB of its limit 4.0 GiB (all processes in /sys/fs/cgroup/docker/abc)"
    )


def test_every_table_of_the_page_scrolls_inside_its_own_box():
    r = _hostile_run()
    report = build_report(r, analyze(r))
    report["loaders"][0]["dataset_type"] = "a.very.long.module.path." * 20 + "Dataset"
    page = render_html(report, timeline_from_run(r), {"exit_code": 0, "passed": True, "rules": [{"rule": "r"}]})
    check = parse_page(page)  # asserts that no <table> sits outside a <div class="scroll">
    assert page.count("<table") >= 6 and check.unboxed_tables == 0
    # the long words of the loaders table may wrap, so at 1200 px it fits without scrolling at all
    assert "persistent_<wbr>workers" in page and "a.<wbr>very.<wbr>long.<wbr>" in page
    assert not re.search(r"\d\.<wbr>", page)  # but never a number at its decimal point
    assert "<td>/<wbr>nonexistent</td>" in page  # and a path in the verdict after each "/"


def test_a_missing_value_is_said_in_words_never_a_dash():
    r = _hostile_run()
    report = build_report(r, analyze(r))
    lo = report["loaders"][0]
    lo.update(num_workers=0, prefetch_factor=None, start_method=None, dataset_len=None, first_batch_s=None)
    report["findings"].append(Finding("gap", "info", "t", "d", "f", {"signal": None, "pids": []}).to_dict())
    page = render_html(report, timeline_from_run(r))
    cells = [html.unescape(c) for c in re.findall(r"<td>([^<]*)</td>", page)]
    assert "-" not in cells and "?" not in cells
    loaders = re.search(r'<section id="loaders">.*?</section>', page)
    assert loaders and "<td>no __len__</td>" in loaders.group(0) and "<td>none</td>" in loaders.group(0)
    assert "<td>not measured</td>" in loaders.group(0)  # first_batch_s: a reading the run lacks
    card = re.search(r'id="finding-gap".*?</article>', page)
    assert card and "<td>not measured</td>" in card.group(0) and "<td>none</td>" in card.group(0)


def test_the_jobs_memory_line_draws_only_readings_that_can_be_summed_and_never_passes_the_cgroup_limit():
    # The parent read at 700 MiB of PSS before it forked; its two workers, read after the fork, share half of its
    # pages (each 200 MiB of PSS): summed with the parent's stale reading the job "held" 1,100 MiB at fork, over its
    # 1,000 MiB cgroup limit. Once the parent is read again (350 MiB) the sum is the job's.
    from dlprobe.analysis.measures.stats import job_pss_summable
    from dlprobe.analysis.run.model import ProcessRecord, Series

    def proc(pid, role, t, pss, ppid=None):
        n = len(t)
        return ProcessRecord(pid, role, ppid=ppid,
                             series=Series(t=t, rss=[None] * n, uss=[None] * n, pss=pss, swap=[None] * n))  # fmt: skip

    parent = proc(1, "main", [0.0, 4.0], [700 * MiB, 350 * MiB])
    workers = [proc(10 + i, "worker", [2.0, 3.0, 4.0, 5.0], [200 * MiB] * 4, ppid=1) for i in range(2)]
    times, totals = job_pss_summable([parent, *workers])
    assert times == [0.0, 4.0, 5.0]  # 2.0 and 3.0 summed a reading from before the fork
    assert totals == [700 * MiB, 750 * MiB, 400 * MiB]  # at 5.0 the parent is past its last reading
    # and where readings taken together still sum over the limit, the timeline's line stops at it and counts them
    r = run([], [proc(1, "main", [100.0, 101.0], [1200 * MiB] * 2)])
    r.system = SystemSeries(t=[100.0, 101.0], cgroup_usage=[900 * MiB] * 2, cgroup_limit=1000 * MiB)
    timeline = timeline_from_run(r)
    assert [y for _, y in timeline["job_pss"]] == [1000.0, 1000.0]
    assert timeline["job_pss_over_limit"] == {"readings": 2, "highest": 1200.0}


def test_dlprobe_s_own_copy_of_the_training_process_is_not_in_the_job_s_memory():
    # tests/scripts/gc_copy_loader.py under `dlprobe check` on a busy machine: the readiness copy (a grandchild by way
    # of its forking child, never read itself) read once at 84 MiB beside the parent's 218 MiB: 302 MiB where the job
    # held 265 before and after, a baseline gate's false alarm. dlprobe's forks are its own cost, not the job's.
    from dlprobe.analysis.measures.stats import job_pss_summable, tree_total
    from dlprobe.analysis.run.model import ROLE_CHECK, ProcessRecord, Series

    def proc(pid, role, t, pss, ppid=None):
        n = len(t)
        return ProcessRecord(pid, role, ppid=ppid,
                             series=Series(t=t, rss=[None] * n, uss=[None] * n, pss=pss, swap=[None] * n))  # fmt: skip

    parent = proc(1, "main", [0.0, 1.0, 3.0], [145 * MiB, 218 * MiB, 265 * MiB])
    copy = proc(3, ROLE_CHECK, [2.0], [84 * MiB], ppid=2)
    times, totals = job_pss_summable([parent, copy])
    assert times == [0.0, 1.0, 3.0] and max(totals) == 265 * MiB
    # every sum over the job leaves it out alike (the node's USS, the job's /dev/shm pages)
    assert tree_total([parent, copy], "pss") == ([0.0, 1.0, 3.0], [145 * MiB, 218 * MiB, 265 * MiB])
