"""The memory charts' data (report.html and memory.png): readings drawn as read, the span between two readings as a
band, nothing above the cgroup's limit, and a projection with its range, ceiling and where it was measured."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis import analyze
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.report.build import build_report
from dlprobe.analysis.report.timeline import timeline_from_run
from dlprobe.analysis.run.model import SystemSeries
from dlprobe.render.html import render_html, timeline_charts
from dlprobe.render.projection_chart import projection_chart, projection_views
from dlprobe.render.readings import as_read
from tests.unit.fakes import MiB, run, series, worker


def test_each_reading_is_a_point_at_its_time_and_between_two_the_band_runs_from_the_lower_to_the_higher():
    data = as_read([(0.0, 100.0), (10.0, 300.0), (12.0, 250.0)])
    assert data.points == [(0.0, 100.0), (10.0, 300.0), (12.0, 250.0)]
    # no value is claimed at 5 s: the band from 0 to 10 s spans both readings
    assert data.spans == [(0.0, 10.0, 100.0, 300.0), (10.0, 12.0, 250.0, 300.0)]
    assert data.clipped == 0 and data.highest is None


def test_a_summed_reading_above_a_limit_the_kernel_enforces_is_drawn_at_it_and_counted():
    data = as_read([(0.0, 700.0), (1.0, 1150.0), (2.0, 900.0)], bound=1000.0)
    assert max(y for _, y in data.points) == 1000.0
    assert max(hi for *_, hi in data.spans) == 1000.0
    assert data.clipped == 1 and data.highest == 1150.0
    assert as_read([(0.0, 1150.0)], bound=None).points == [(0.0, 1150.0)]  # no limit known: as read


def _run_over_its_limit() -> Any:
    """A worker whose USS reads 1,150 MiB (a sampling artefact) in a 1,000 MiB cgroup; readings 5 s apart."""
    w = worker(11, 0, series([300 * MiB, 1150 * MiB, 600 * MiB], [400 * MiB] * 3))
    w.series.t = [100.0, 105.0, 110.0]
    r = run([], [w])
    r.system = SystemSeries(t=[100.0, 105.0, 110.0], cgroup_usage=[900 * MiB] * 3, cgroup_limit=1000 * MiB)
    return r


def test_the_memory_chart_draws_no_reading_above_the_cgroup_limit_and_says_so():
    r = _run_over_its_limit()
    notes: list[str] = []
    [mem, *_] = timeline_charts(build_report(r, analyze(r)), timeline_from_run(r), notes)
    assert mem.lines == []  # readings are not joined by straight lines
    uss = next(s for s in mem.readings if s.label.endswith("USS"))
    assert [y for _, y in uss.data.points] == [300.0, 1000.0, 600.0]
    assert all(hi <= 1000.0 for *_, hi in uss.data.spans)
    assert (1000.0, "memory limit (cgroup) 1000.0 MiB") in mem.hlines
    [note] = mem.notes
    assert "1 reading of loader 0 worker 0 (pid 11) USS above the cgroup limit (1,000 MiB; up to 1,150 MiB" in note
    page = render_html(build_report(r, analyze(r)), timeline_from_run(r))
    assert "drawn at the limit" in page and "<polyline" not in page.split("The loop")[0]


def _cow_finding(measured_at: float) -> dict[str, Any]:
    rows = [
        {"pid": 10 + i, "worker_id": i, "counted": True,
         "projection": {"held_at_start_bytes": 2 * MiB, "projected_bytes": 80 * MiB,
                        "projected_low_bytes": 74 * MiB, "projected_high_bytes": 82 * MiB,
                        "copies": {"measured_bytes": 70 * MiB, "ceiling_bytes": 264 * MiB,
                                   "ceiling_source": "the parent's anonymous memory at fork",
                                   "measured_at_epoch_fraction": measured_at},
                        "allocations": {"measured_bytes": 0, "ceiling_bytes": 1000 * MiB,
                                        "ceiling_source": "the cgroup limit",
                                        "measured_at_epoch_fraction": measured_at}}}
        for i in range(4)
    ]  # fmt: skip
    evidence = {"workers": rows, "counted_workers": 4, "total_bytes": 283 * MiB, "projected_total_bytes": 301 * MiB,
                "projected_low_total_bytes": 283 * MiB, "projected_high_total_bytes": 330 * MiB,
                "measured_at_epoch_fraction": measured_at, "limit_bytes": 1000 * MiB,
                "limit_kind": "cgroup limit"}  # fmt: skip
    return Finding("cow-growth", "warning", "t", "d", "f", evidence, loader_id=0).to_dict()


def test_a_projection_is_drawn_to_the_epochs_end_with_its_range_ceiling_and_where_it_was_measured():
    [view] = projection_views([_cow_finding(0.3)])
    chart = projection_chart(view)
    assert chart.x_range == (0.0, 1.0) and chart.x_label == "share of the epoch done"
    [read] = chart.readings  # the workers' start and their last reading, the band between them
    assert read.data.points == [(0.0, 8.0), (0.3, 283.0)]
    [band] = chart.bands  # the range every curve the readings allow reaches at the epoch's end
    assert band.points == [(0.3, 283.0), (1.0, 330.0), (1.0, 283.0)]
    assert "301.0 MiB" in band.label and "283.0 MiB-330.0 MiB" in band.label
    [projected] = chart.lines
    assert projected.points == [(0.3, 283.0), (1.0, 301.0)] and projected.dash == "dashed"
    [(ceiling, label)] = chart.ceilings  # 4 workers, each its 2 MiB at start plus at most 264 MiB of copies
    assert ceiling == 4 * 266.0 and "the parent's anonymous memory at fork" in label
    assert chart.hlines == [(1000.0, "the cgroup limit: 1000.0 MiB")]
    assert chart.marks == [(0.3, "measured to 30% of the epoch")]


def test_a_projection_made_at_the_epochs_end_is_a_measurement_and_gets_no_chart():
    assert projection_views([_cow_finding(1.0)]) == []


def test_memory_png_draws_the_node_total_as_read_and_never_above_its_limit(tmp_path, monkeypatch):
    from dlprobe.render import plot

    drawn = []
    real = plot._plot_readings

    def recording(ax, data, *args, **kw):
        drawn.append(data)
        real(ax, data, *args, **kw)

    monkeypatch.setattr(plot, "_plot_readings", recording)
    node = {"pss_total": {"t": [100.0, 101.0, 102.0], "bytes": [700 * MiB, 1150 * MiB, 900 * MiB]},
            "memory_limit": 1000 * MiB, "memory_limit_kind": "cgroup"}  # fmt: skip
    data = {"script": "train.py", "t0": 100.0, "processes": [], "shm_t": [], "shm_used": [], "shm_total": None,
            "node": node, "cgroup_limit": 1000 * MiB}  # fmt: skip
    plot.plot_memory(data, tmp_path / "memory.png")  # type: ignore[arg-type]
    [total] = drawn
    assert [y for _, y in total.points] == [700.0, 1000.0, 900.0] and total.clipped == 1
    assert (tmp_path / "memory.png").stat().st_size > 10_000


def test_growth_by_new_allocations_is_bounded_by_the_limit_and_never_drawn_past_it():
    # the OOM-killed worker's shape: it allocated (not copied) and its projection reaches the 600 MiB cgroup limit
    finding = _cow_finding(0.16)
    for row in finding["evidence"]["workers"]:
        row["projection"]["copies"]["measured_bytes"] = 3 * MiB
        row["projection"]["allocations"]["measured_bytes"] = 40 * MiB
    finding["evidence"].update(limit_bytes=600 * MiB, projected_total_bytes=604 * MiB,
                               projected_high_total_bytes=604 * MiB)  # fmt: skip
    chart = projection_chart(projection_views([finding])[0])
    # the ceiling is the limit the allocations were held under, not the copies' (which the readings passed)
    assert chart.ceilings == [(600.0, "ceiling: the cgroup limit, what new allocations cannot pass: 600.0 MiB")]
    assert chart.hlines == []  # the limit once
    assert max(y for _, y in chart.bands[0].points) == 600.0 and chart.lines[0].points[-1] == (1.0, 600.0)
    said = "reaches the cgroup limit (600 MiB) before the epoch's end (604 MiB at the top"
    assert any(said in n for n in chart.notes)


def test_the_band_between_readings_is_one_stepped_outline_of_their_spans():
    from dlprobe.render.svg import _band_path

    spans = as_read([(0.0, 100.0), (10.0, 300.0), (12.0, 250.0)]).spans
    # along the tops (300 from 0 to 12), down to the last span's bottom, back along the bottoms (250, then 100)
    assert _band_path(spans, lambda x: x, lambda y: y) == "M0 300H12V250H10V100H0Z"


def test_too_many_workers_gets_the_chart_from_its_workers_rows_unless_cow_growth_drew_that_loader():
    cow = _cow_finding(0.25)
    rows = [{**r, "uss_peak_bytes": 90 * MiB} for r in cow["evidence"]["workers"]]
    workers = Finding("too-many-workers", "warning", "t", "d", "f", {"workers": rows}, loader_id=0).to_dict()
    [view] = projection_views([workers])
    assert view.code == "too-many-workers" and view.workers == 4 and view.measured_at == 0.25
    assert view.measured_bytes == 4 * (2 + 70) * MiB and view.projected_bytes == 4 * 80 * MiB
    assert (view.low_bytes, view.high_bytes) == (4 * 74 * MiB, 4 * 82 * MiB)
    assert [v.code for v in projection_views([workers, cow])] == ["cow-growth"]  # one chart per loader


def test_the_jobs_summed_memory_over_the_limit_is_drawn_at_it_and_the_machine_chart_says_how_high_it_read():
    r = _run_over_its_limit()
    r.processes[0].series.pss = [300 * MiB, 1200 * MiB, 600 * MiB]
    charts = timeline_charts(build_report(r, analyze(r)), timeline_from_run(r), [])
    machine = next(c for c in charts if c.title.startswith("Machine:"))
    job = next(s for s in machine.readings if s.label.startswith("the job's own memory"))
    assert max(y for _, y in job.data.points) == 1000.0
    [note] = machine.notes
    assert note.startswith("1 reading of the job's own memory (sum of its processes' PSS) above the cgroup limit")
    assert "up to 1,200 MiB as read) drawn at the limit" in note
