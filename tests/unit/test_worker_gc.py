"""The worker's full-collection timer: what the callback keeps, what send writes, and that it leaves gc.callbacks."""

from __future__ import annotations

import gc
import json
import os

import pytest

from dlprobe.in_training import event_log, worker_gc
from dlprobe.rundir.schema import EV_WORKER_GC, EVENTS_FILE, WORKER_GC_KEPT


@pytest.fixture
def timer(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_gc, "_timed", [])
    monkeypatch.setattr(worker_gc, "_kept", [0])
    monkeypatch.setattr(event_log, "_log", event_log.EventLog(str(tmp_path)))
    yield tmp_path
    if worker_gc._on_collection in gc.callbacks:
        gc.callbacks.remove(worker_gc._on_collection)


def events(run_dir) -> list[dict]:
    path = run_dir / EVENTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_full_collections_are_timed_and_young_ones_are_not(timer):
    worker_gc.install()
    worker_gc.install()  # once only
    assert gc.callbacks.count(worker_gc._on_collection) == 1
    gc.collect(0)
    gc.collect(1)
    assert worker_gc._timed == []
    gc.collect()
    [(began, ended)] = worker_gc._timed
    assert began <= ended
    worker_gc.send(0, 1, 4711)
    [event] = [e for e in events(timer) if e["ev"] == EV_WORKER_GC]
    assert (event["loader"], event["worker"], event["pid"]) == (0, 1, 4711)
    assert event["collections"] == [[round(began, 6), round(ended, 6)]]
    worker_gc.send(0, 1, 4711)  # nothing new: no event
    assert len([e for e in events(timer) if e["ev"] == EV_WORKER_GC]) == 1


def test_the_callback_leaves_once_enough_are_timed_and_the_script_s_own_stays(timer):
    seen: list[str] = []

    def script_callback(phase, info):
        seen.append(phase)

    worker_gc.install()
    gc.callbacks.append(script_callback)
    try:
        for _ in range(WORKER_GC_KEPT + 2):
            gc.collect()
        assert len(worker_gc._timed) == WORKER_GC_KEPT  # bounded
        worker_gc.send(0, 0, 1)
        assert worker_gc._on_collection not in gc.callbacks and script_callback in gc.callbacks
        gc.collect()
        assert seen.count("stop") == WORKER_GC_KEPT + 3  # the script's callback saw every collection
    finally:
        gc.callbacks.remove(script_callback)


def _forked_child_times_collections() -> bool:
    """Fork, and report from the child whether its collections were timed from its first instruction on."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a full collection straight away, before anything else of dlprobe's ran
        gc.collect()
        os.write(write, b"1" if worker_gc._timed else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    return answer == b"1"


def test_a_worker_forked_while_its_loader_starts_times_collections_from_its_fork(timer):
    # the collector's counts are the parent's at the fork: a worker's first full collection can run before its
    # worker_init_fn, where start_worker installs the timer
    worker_gc.arm(True)
    try:
        assert _forked_child_times_collections()
    finally:
        worker_gc.arm(False)
    assert worker_gc._on_collection not in gc.callbacks  # the parent's collector is left alone
    assert not _forked_child_times_collections()  # any other fork of the script's is left alone too
