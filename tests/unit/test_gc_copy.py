"""gc-copy and the collection steps on synthetic runs: named where the copy's pages are private and dirty, not where
a memory-mapped file's pages rose while a collection happened to run."""

from __future__ import annotations

from dlprobe.analysis.findings.gc_copy import find_gc_copy
from dlprobe.analysis.measures.stats import job_pss_peak
from dlprobe.analysis.measures.worker_steps import job_steady_peak, worker_steps
from dlprobe.analysis.report.build import build_report
from dlprobe.analysis.run.model import ProcessRecord, Series
from dlprobe.loader_model.worker_memory import FULL_COLLECTION
from tests.unit.fakes import MiB, loader, run, series, worker

USS = [10, 13, 13.2, 47.5, 47.6, 47.8]  # MiB at 100..105 s: the copy between 102 and 103 s


def _worker(pid: int, worker_id: int, dirty: list[float]):
    s = series([int(v * MiB) for v in USS], [int(v * MiB) + 100 * MiB for v in USS])
    s.private_dirty = [int(v * MiB) for v in dirty]
    proc = worker(pid, worker_id, s)
    proc.full_collections = [(102.4, 102.55)]
    return proc


def _run(dirty: list[float]):
    return run([loader()], [_worker(11, 0, dirty), _worker(12, 1, dirty)])


def test_a_dirty_rise_a_collection_ran_in_is_the_copy():
    copied = _run([2, 5, 5.2, 39.5, 39.6, 39.8])
    for proc in copied.processes:
        found = worker_steps(copied, proc)
        assert found is not None and [s.cause for s in found.steps] == [FULL_COLLECTION]
    [finding] = find_gc_copy(copied)
    assert finding.evidence["total_bytes"] >= 2 * 30 * MiB and {
        r["worker_id"] for r in finding.evidence["gc_steps"]
    } == {0, 1}


def test_a_file_s_clean_pages_rising_with_a_collection_are_no_copy():
    # Private_Dirty flat: the rise is a memory-mapped file's pages this worker alone read (they count in USS)
    mapped = _run([2, 5, 5.2, 5.3, 5.3, 5.4])
    for proc in mapped.processes:
        found = worker_steps(mapped, proc)
        assert found is not None and all(s.cause != FULL_COLLECTION for s in found.steps), found.steps
    assert find_gc_copy(mapped) == []


# numpy_dataset.py's job as read in one run: each worker's collection copied 34.4 MiB between its readings at 102 and
# 103 s; its PSS rose 22.9 MiB and the parent's 22.6 (pages it shared with two workers are now its own).
WORKER_PSS_ANON = [63.7, 66.0, 66.2, 89.1, 89.1, 89.2]


def _job(main_pss_anon: list[tuple[float, float]]):
    workers = [_worker(11, 0, [2, 5, 5.2, 39.5, 39.6, 39.8]), _worker(12, 1, [2, 5, 5.2, 39.5, 39.6, 39.8])]
    for proc in workers:
        proc.series.pss_anon = [int(v * MiB) for v in WORKER_PSS_ANON]
    t = [at for at, _ in main_pss_anon]
    unread: list[int | None] = [None] * len(t)
    main = ProcessRecord(1, "main", comm="python", series=Series(t=t, rss=unread, uss=unread, pss=unread, swap=unread))
    main.series.pss_anon = [int(v * MiB) for _, v in main_pss_anon]
    return run([loader()], [main, *workers])


def test_the_jobs_steady_total_is_the_same_whether_its_steps_fell_before_or_after_its_peak():
    # read after the copy: its sums hold the steps (less them: 225.3 MiB); the one sum the copy was under way in
    # (the parent's reading at 102.7 s holds its side, the workers' at 102 s not yet theirs) is left out
    after = _job([(100.0, 93.0), (101.5, 93.1), (102.7, 115.7), (104.5, 115.8)])
    # the parent last read before the copy (a run that ended soon after it): the job's peak came before the steps
    before = _job([(100.0, 93.0), (101.5, 93.1), (102.5, 93.1)])
    totals = [job_steady_peak(r) for r in (after, before)]
    assert all(t is not None and abs(t - 225.5 * MiB) < 0.2 * MiB for t in totals), [t / MiB for t in totals]
    # every step taken off the peak wherever it fell read the second 69 MiB lower: a baseline gate's false alarm
    peaks = [job_pss_peak(r.processes, "pss_anon") for r in (after, before)]
    assert abs(peaks[0] - peaks[1] - 68.6 * MiB) < 0.5 * MiB


def test_a_copy_that_spans_the_steady_part_s_first_reading_is_not_steady_growth():
    # the collection (100.8-101.4 s) ran across the reading right after the first batch: 10.7 MiB of the copy is in
    # what the worker held at the start, the other 28.3 MiB came after it; neither part is growth
    uss = [7.0, 17.7, 46.0, 46.1, 46.2, 46.3]
    proc = worker(11, 0, series([int(v * MiB) for v in uss], [int(v * MiB) + 100 * MiB for v in uss]))
    proc.full_collections = [(100.8, 101.4)]
    report = build_report(run([loader()], [proc]), [])
    [growth] = [p["growth"] for p in report["processes"] if p["role"] == "worker"]
    assert [s.get("held_at_start") for s in growth["steps"]] == [True]
    assert growth["steady_bytes"] < 1 * MiB, growth  # 0.3 MiB: the readings after the copy
    assert growth["held_at_start_bytes"] == int(17.7 * MiB) - int(7.0 * MiB)


def test_a_collection_before_the_first_reading_is_counted_as_one_no_reading_shows():
    uss = [46.0, 46.1, 46.2, 46.3]  # the copy is in every reading
    proc = worker(11, 0, series([int(v * MiB) for v in uss], [int(v * MiB) + 100 * MiB for v in uss]))
    proc.full_collections = [(99.5, 99.7)]
    report = build_report(run([loader()], [proc]), [])
    [growth] = [p["growth"] for p in report["processes"] if p["role"] == "worker"]
    assert growth["steps"] == [] and growth["collected_before_first_reading"] == 1
    proc.full_collections = [(101.5, 101.6)]  # after it: the readings had their chance to show it
    [growth] = [p["growth"] for p in build_report(run([loader()], [proc]), [])["processes"] if p["role"] == "worker"]
    assert "collected_before_first_reading" not in growth
