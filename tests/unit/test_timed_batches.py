"""The workers' own batch rows, read once for every analyzer: old and new row shapes, damaged rows, appended events."""

from __future__ import annotations

from dlprobe.analysis.measures.timed_batches import timed_batches
from tests.unit import fakes


def _event(rows, loader=0, **extra):
    return {"ev": "worker_batches", "t": 120.0, "pid": 11, "loader": loader, "worker": 1, "t0": 100.0, "rows": rows,
            **extra}  # fmt: skip


def test_rows_with_and_without_clocks_and_damaged_ones():
    run = fakes.run([], [], events=[
        _event([[4, 0.5, 0.01, 0.002, 40, 0.008, 0.002, 0.001],  # with the worker's clocks
                [5, 0.6, 0.01, 0.002, 50],  # written before them
                [6, 0.7, "x", 0.002, 60],  # damaged: skipped
                [7, 0.8, 0.01, 0.002, 70, None, 0.0, 0.0]], stride=2, tid=99),  # clocks unreadable: none
        _event([[1, 0.1, 0.01, 0.0, 10]], loader=1),  # another loader's
    ])  # fmt: skip
    rows = timed_batches(run, 0)
    assert [(r.task, r.first, r.stride, r.writer, r.worker) for r in rows] == [(4, 40, 2, 99, 1), (5, 50, 2, 99, 1),
                                                                                 (7, 70, 2, 99, 1)]  # fmt: skip
    assert rows[0].start == 100.5 and abs(rows[0].build_s - 0.012) < 1e-9
    assert rows[0].clocks == (0.008, 0.002, 0.001) and rows[1].clocks is None and rows[2].clocks is None


def test_events_appended_after_a_read_are_read_too():
    run = fakes.run([], [], events=[_event([[1, 0.1, 0.01, 0.0, 10]])])
    assert len(timed_batches(run, 0)) == 1
    run.events.append(_event([[2, 0.2, 0.01, 0.0, 20]]))
    assert [r.task for r in timed_batches(run, 0)] == [1, 2]
