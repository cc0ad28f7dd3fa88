"""A worker's per-batch rows: what a row holds, the chunked sends, and the cap that keeps a long run bounded."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dlprobe.in_training import worker_batches
from dlprobe.in_training.worker_batches import WorkerBatches


class FakeSlot:
    def __init__(self) -> None:
        self.recent: list[tuple[int, float, float, float, int]] = []

    def keep_recent(self, *row: Any) -> None:
        self.recent.append(row)


class FakeLog:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, ev: str, **fields: Any) -> None:
        self.events.append({"ev": ev, **fields})


def recorder(monkeypatch, cap: int) -> tuple[worker_batches.WorkerBatches, FakeLog]:
    log = FakeLog()
    monkeypatch.setattr(worker_batches, "get_log", lambda: log)
    monkeypatch.setattr(worker_batches, "WORKER_BATCH_CAP", cap)
    monkeypatch.setattr(worker_batches, "FLUSH_INTERVAL_S", 1e9)  # one send, at the end
    monkeypatch.setattr(worker_batches, "_open_run_delay", lambda: None)  # no schedstat: queued unknown
    return worker_batches.WorkerBatches(loader_id=1, worker_id=3), log


def test_a_row_is_start_fetch_and_collate_relative_to_the_chunk(monkeypatch):
    rec, log = recorder(monkeypatch, cap=100)
    slot = FakeSlot()
    rec.add(slot, 1, 10.0, 10.25, 10.5, 7)
    rec.add(slot, 2, 11.0, 11.5, 11.75, 9)
    rec.flush()
    [event] = log.events
    assert event["ev"] == "worker_batches" and (event["loader"], event["worker"]) == (1, 3)
    assert event["t0"] == 10.0 and event["stride"] == 1
    # no torch worker loop: task -1; no clock reads between begin() and add() here: CPU 0, queued unknown
    assert [r[:5] for r in event["rows"]] == [[-1, 0.0, 0.25, 0.25, 7], [-1, 1.0, 0.5, 0.25, 9]]
    assert all(r[7] == worker_batches.QUEUED_UNKNOWN for r in event["rows"])
    assert slot.recent == [(-1, 10.0, 10.25, 10.5, 7), (-1, 11.0, 11.5, 11.75, 9)]  # and into the slot's ring


def test_past_the_cap_the_stride_doubles_so_rows_grow_with_the_log_of_the_batches(monkeypatch):
    rec, log = recorder(monkeypatch, cap=10)
    slot = FakeSlot()
    for fetch in range(1, 1001):
        rec.add(slot, fetch, float(fetch), fetch + 0.1, fetch + 0.2, fetch)
    rec.flush()
    rows = log.events[0]["rows"]
    # 10 rows at each stride 1, 2, 4, 8, 16, 32 (fetches 1 to 608), then every 64th: 640 to 960
    assert len(rows) == 66 and log.events[0]["stride"] == 64
    assert len(slot.recent) == 1000  # the ring in the slot takes every batch (it keeps the last 32)
    starts = [log.events[0]["t0"] + r[1] for r in rows[:12]]
    assert starts[:10] == [float(f) for f in range(1, 11)] and starts[10:] == [12.0, 14.0]


def test_a_row_splits_the_fetch_and_the_collate_into_cpu_time_and_queued_time(monkeypatch):
    rec, log = recorder(monkeypatch, cap=100)
    clock = iter([1.0, 1.25, 1.375])  # thread CPU at the fetch's start, at the collate, at the end
    monkeypatch.setattr(worker_batches, "_thread_cpu", lambda: next(clock))
    queued = iter([5.125])  # run-queue seconds at the batch's end; 5.0 at the previous one's
    monkeypatch.setattr(WorkerBatches, "_queued", lambda self: next(queued))
    rec.run_delay_fd, rec.queued_last = 99, 5.0
    rec.begin()
    rec.collating()
    rec.add(FakeSlot(), 1, 10.0, 10.5, 10.75, 7)
    rec.flush()
    [row] = log.events[0]["rows"]
    assert row == [-1, 0.0, 0.5, 0.25, 7, 0.25, 0.125, 0.125]


def test_the_queued_time_is_read_from_this_threads_schedstat():
    rec = worker_batches.WorkerBatches(loader_id=0, worker_id=0)
    if rec.run_delay_fd is None:
        pytest.skip("this kernel has no /proc/thread-self/schedstat")
    assert rec._queued() >= 0.0 and rec.run_delay_fd is not None
    end = time.thread_time() + 0.02
    while time.thread_time() < end:  # burn 20 ms of CPU: the clock read in add() must see it
        pass
    rec.begin()
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    rec.collating()
    rec.add(FakeSlot(), 1, 0.0, 0.01, 0.02, 0)
    assert rec.rows[0][5] >= 0.02 and rec.rows[0][6] < 0.02


def test_a_worker_of_a_later_epoch_starts_at_the_stride_the_loader_reached():
    """Workers forked for each epoch inherit the loader's batches so far: many epochs keep a log-bounded share of rows
    (not WORKER_BATCH_CAP more per worker and epoch)."""
    from dlprobe.in_training import worker_batches as wb
    from dlprobe.rundir.schema import WORKER_BATCH_CAP

    assert wb.stride_after(0) == 1 and wb.stride_after(WORKER_BATCH_CAP - 1) == 1
    assert wb.stride_after(WORKER_BATCH_CAP) == 2 and wb.stride_after(3 * WORKER_BATCH_CAP) == 4
    rows = 0
    saved = dict(wb.loader_batches)
    try:
        for epoch in range(200):  # 200 epochs of 10,000 batches, each with a worker of its own (outside torch: one)
            wb.loader_batches[7] = epoch * 10_000
            stride = wb._inherited_stride(7)
            kept = -(-10_000 // stride)
            rows += min(kept, WORKER_BATCH_CAP) + max(0, kept - WORKER_BATCH_CAP) // 2
    finally:
        wb.loader_batches.clear()
        wb.loader_batches.update(saved)
    assert rows < 20 * WORKER_BATCH_CAP  # each epoch starting afresh would keep 200 x 5,000
