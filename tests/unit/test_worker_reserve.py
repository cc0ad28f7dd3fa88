"""run's memory advice keeps free per worker what the run measured (the spread of its workers' USS peaks, the cgroup's
charge beyond their USS), as tune does, and the flat 10% only where neither was measured."""

from __future__ import annotations

from dlprobe.analysis.model import ProcessRecord, Series, SystemSeries
from dlprobe.analysis.throughput_findings import find_too_many_workers
from tests.unit.fakes import MiB, loader, run, series, worker

LIMIT = 1800 * MiB
TICKS = [100.0, 101.0, 102.0, 103.0, 104.0]  # the workers start at 102


def _parent() -> ProcessRecord:
    """The training process: 150 MiB private, its RSS 10 MiB up while the workers run (its own new pages)."""
    rss = [200 * MiB, 200 * MiB, 205 * MiB, 210 * MiB, 210 * MiB]
    return ProcessRecord(1, "main", comm="python", series=Series(t=list(TICKS), rss=rss, uss=[150 * MiB] * 5))


def _workers(*peaks: int) -> list[ProcessRecord]:
    return [worker(1000 + k, k, series([peak] * 3, [peak + 150 * MiB] * 3, t0=102.0)) for k, peak in enumerate(peaks)]


def _cgroup(cache_read: bool) -> SystemSeries:
    """Under the limit: 280 MiB held before the workers; then their 720 MiB of USS, 2 MiB each beyond it (page
    tables, kernel stacks), the parent's 10 MiB, and 50 MiB more page cache (files read) that the kernel would drop."""
    usage = [300 * MiB, 300 * MiB, 700 * MiB, 1050 * MiB, 1084 * MiB]
    cache = [None, 20 * MiB, None, None, 70 * MiB] if cache_read else [None] * 5
    return SystemSeries(t=list(TICKS), cgroup_usage=usage, cgroup_cache=cache, cgroup_limit=LIMIT)


def _evidence(procs: list[ProcessRecord], system: SystemSeries) -> dict:
    [finding] = find_too_many_workers(run([loader(num_workers=6)], [_parent(), *procs], system))
    return finding.evidence


def test_the_cgroup_charge_beyond_the_workers_uss_is_their_reserve_and_page_cache_is_not():
    e = _evidence(_workers(360 * MiB, 360 * MiB), _cgroup(cache_read=True))
    assert e["memory_reserve"] == "measured" and e["uncounted_per_worker_bytes"] == 2 * MiB
    assert e["worker_peak_spread_bytes"] == 0 and e["reserve_per_worker_bytes"] == 2 * MiB
    # the limit less all the cgroup held besides the workers: 280 MiB before them and the parent's 10 MiB since
    assert e["memory_for_workers_bytes"] == LIMIT - 290 * MiB
    assert e["workers_that_fit_memory"] == (LIMIT - 290 * MiB) // (362 * MiB) == 4


def test_without_the_cgroup_charge_the_flat_share_is_kept_and_the_spread_still_said():
    # Workers alike have a spread of 0: as the whole reserve it would leave no margin at all.
    e = _evidence(_workers(360 * MiB, 340 * MiB), _cgroup(cache_read=False))  # a run that read no page cache
    assert e["memory_reserve"] == "flat" and e["uncounted_per_worker_bytes"] is None
    assert e["reserve_per_worker_bytes"] is None and e["worker_peak_spread_bytes"] == 20 * MiB
    assert e["memory_for_workers_bytes"] == LIMIT - 150 * MiB  # the parent's private memory, as before
    assert e["workers_that_fit_memory"] == int(0.9 * (LIMIT - 150 * MiB) // (360 * MiB))


def test_one_worker_and_no_cgroup_charge_keep_the_flat_ten_percent_and_say_so():
    e = _evidence(_workers(360 * MiB), _cgroup(cache_read=False))
    assert e["memory_reserve"] == "flat" and e["reserve_per_worker_bytes"] is None
    assert e["workers_that_fit_memory"] == int(0.9 * (LIMIT - 150 * MiB) // (360 * MiB))
