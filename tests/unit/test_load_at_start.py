"""A worker's one-time load at start (worker_init_fn) told from growth with the batches when a busy machine stretches
the load past the middle of a short run: by when the worker built its first batch."""

from __future__ import annotations

from dlprobe.analysis.measures.worker_growth import first_batch_built, loaded_at_start, loaded_before
from dlprobe.analysis.run.model import Series
from dlprobe.units import MiB
from tests.unit.fakes import loader, run, worker

# RSS (MiB) of a worker filling a 350 MiB table in worker_init_fn on a loaded 2-core machine, as read (seconds from
# its first reading); its first batch was built at 1.94 s, just before the reading that saw the load done.
SLOW_LOAD = [(0.0, 156), (0.23, 228), (0.54, 270), (0.73, 300), (1.02, 342), (1.24, 378), (1.52, 418), (1.74, 478),
             (2.02, 518), (2.24, 518), (2.5, 518), (2.74, 518), (2.99, 518), (3.24, 518), (3.49, 518)]  # fmt: skip
BUILT_AT = 1.94


def _series(points: list[tuple[float, int]]) -> Series:
    t = [100.0 + s for s, _ in points]
    rss = [v * MiB for _, v in points]
    return Series(t=t, rss=rss, uss=list(rss), pss=list(rss), swap=[0] * len(t))


def test_a_load_done_by_the_first_batch_is_a_load_at_start_even_when_it_ends_late_in_the_run():
    series = _series(SLOW_LOAD)
    assert loaded_before(series, 100.0 + BUILT_AT)
    assert loaded_at_start(series, 100.0 + BUILT_AT)


def test_memory_that_grows_with_the_batches_is_not_a_load_at_start():
    ramp = _series([(0.25 * i, 156 + 25 * i) for i in range(15)])  # a cache filling batch after batch
    assert not loaded_before(ramp, 100.0 + 0.3)  # its first batch came early: the rise came after it
    assert not loaded_at_start(ramp, 100.0 + 0.3)
    assert not loaded_before(_series(SLOW_LOAD), None)  # no batch timed: no claim from it


def test_the_first_batch_built_is_read_from_the_workers_own_rows():
    events = [{"ev": "worker_batches", "pid": 1000, "loader": 0, "worker": 0, "t0": 100.0, "stride": 1,
               "rows": [[0, 1.5, 0.4, 0.04, 0], [2, 2.0, 0.01, 0.0, 16]]}]  # fmt: skip
    r = run([loader()], [worker(1000, 0, _series(SLOW_LOAD))], events=events)
    built = first_batch_built(r, 0, 1000)
    assert built is not None and abs(built - (100.0 + BUILT_AT)) < 1e-6
    assert first_batch_built(r, 0, 1001) is None
