"""run's memory advice keeps free per worker what the run measured (the spread of its workers' USS peaks, the cgroup's
charge beyond their USS), as tune does, and the flat 10% only where neither was measured."""

from __future__ import annotations

import pytest

from dlprobe.analysis.findings.throughput import find_too_many_workers
from dlprobe.analysis.run.model import ProcessRecord, Series, SystemSeries
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


# A run under load (2 workers, 350 MiB tables loaded in worker_init_fn, the loop breaking 50 batches in), its
# readings as recorded: per tick the cgroup's usage and page cache (None: not read that tick), then each process's
# (RSS, USS) (USS None: no smaps_rollup that tick). At 110.441 the cgroup was read (with the parent's USS) as the
# workers shut down: 330 MiB lower, while their last USS, from 108.431, still counted their tables.
EXITING = [
    (106.142, 172240896, 65536, (290107392, 152428544), None, None),
    (106.413, 202174464, 40960, (297914368, None), (194527232, 11636736), (193486848, 10244096)),
    (106.922, 512282624, 32768, (297914368, None), (335036416, 152145920), (356012032, 173002752)),
    (107.423, 711770112, 32768, (298147840, 11685888), (427311104, 244420608), (462966784, 279957504)),
    (107.93, 812687360, 32768, (297914368, None), (477642752, 294752256), (513298432, 330289152)),
    (108.431, 938995712, 8192, (298160128, 13176832), (590811136, 379629568), (590815232, 379609088)),
    (108.742, 938971136, None, (297914368, None), (590569472, None), (590573568, None)),
    (110.441, 595566592, 8192, (298160128, 39899136), (590569472, None), (590573568, None)),
    (110.738, 175120384, None, (297914368, None), None, None),
]


def _replayed(rows: list[tuple]) -> tuple[list[ProcessRecord], SystemSeries, dict[int, float]]:
    """The parent (pid 1) and the workers (pids 1000, 1001) with the readings of `rows`, the cgroup's series, and
    when each worker was gone (the first tick without it, after it was seen)."""
    procs = [ProcessRecord(1, "main", comm="python"), *(worker(1000 + k, k, Series()) for k in range(2))]
    for t, _usage, _cache, *readings in rows:
        for proc, reading in zip(procs, readings, strict=True):
            if reading is not None:
                proc.series.t.append(t)
                proc.series.rss.append(reading[0])
                proc.series.uss.append(reading[1])
    system = SystemSeries(t=[r[0] for r in rows], cgroup_usage=[r[1] for r in rows],
                          cgroup_cache=[r[2] for r in rows], cgroup_limit=LIMIT)  # fmt: skip
    gone = {p.pid: next(r[0] for r in rows if r[0] > p.series.t[-1]) for p in procs[1:]}
    return procs, system, gone


# The same tick had it read the workers' USS too, before the cgroup: their last tick, their exit under way.
READ_AS_THEY_EXIT = [*EXITING[:-2], (*EXITING[-2][:4], (590569472, 379629568), (590573568, 379609088)), EXITING[-1]]


@pytest.mark.parametrize("rows", [EXITING, READ_AS_THEY_EXIT], ids=["uss-from-an-earlier-tick", "uss-as-they-exit"])
def test_workers_uss_read_before_the_cgroup_saw_them_exit_is_not_counted_as_room(rows):
    procs, system, gone = _replayed(rows)
    data = run([loader(num_workers=6)], procs, system)
    data.gone = gone
    [finding] = find_too_many_workers(data)
    e = finding.evidence
    # Held besides the workers at 108.431, the last tick that read both workers' USS with the cgroup: 171 MiB (the
    # stale pairing at 110.441 made it -156 MiB, a budget above the limit and 5 workers of 362 MiB in 1.8 GiB).
    held_apart = (938995712 - 8192) - (379629568 + 379609088)
    assert e["memory_for_workers_bytes"] == LIMIT - held_apart < LIMIT
    assert e["uncounted_per_worker_bytes"] == 0 and e["worker_peak_spread_bytes"] == 20480
    assert e["workers_that_fit_memory"] == (LIMIT - held_apart) // (379629568 + 20480) == 4
