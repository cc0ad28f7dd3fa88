"""The worker's attribute counts: what is counted (and by whose __len__), the bound, and when an event is written."""

from __future__ import annotations

import json
from collections import OrderedDict, deque

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, Subset

from dlprobe.in_training import event_log, worker_attrs
from dlprobe.rundir.schema import EV_WORKER_ATTRS, EVENTS_FILE, WORKER_ATTRS_MAX


class Lying(dict):
    def __len__(self):
        raise AssertionError("the user's __len__ ran")


class LyingArray(np.ndarray):
    @property
    def shape(self):
        raise AssertionError("the user's shape ran")


class DS(Dataset):
    def __init__(self):
        self.cache = {}
        self.paths = ["a", "b", "c"]
        self.order = deque([1, 2])
        self.seen = set()
        self.labels = np.zeros((7, 3))
        self.scalar = 3
        self.name = "ds"
        self.tensor = torch.zeros(4)  # not a container counted by length: left out
        self.transform = lambda x: x

    def __len__(self):
        return 10

    def __getitem__(self, i):
        self.cache[i] = i
        return i


def test_containers_and_arrays_are_counted_through_wrappers_and_nothing_else():
    ds = DS()
    assert worker_attrs.counts(ds) == {"self.cache": 0, "self.paths": 3, "self.order": 2, "self.seen": 0,
                                       "self.labels": 7}  # fmt: skip
    wrapped = Subset(ds, [0, 1])
    ds[1]
    assert worker_attrs.counts(wrapped)["self.dataset.cache"] == 1
    assert worker_attrs.counts(wrapped)["self.indices"] == 2


def test_the_users_len_and_shape_are_never_run():
    assert worker_attrs.count(Lying(a=1, b=2)) == 2
    assert worker_attrs.count(OrderedDict(a=1)) == 1
    assert worker_attrs.count(np.zeros(5).view(LyingArray)) == 5
    assert worker_attrs.count(np.float64(1.0)) is None and worker_attrs.count(np.array(3.0)) is None
    assert worker_attrs.count("text") is None and worker_attrs.count(torch.zeros(3)) is None


def test_at_most_the_bound_is_counted():
    ds = DS()
    for i in range(WORKER_ATTRS_MAX + 10):
        setattr(ds, f"extra{i}", [i])
    assert len(worker_attrs.counts(ds)) == WORKER_ATTRS_MAX


@pytest.fixture
def log(tmp_path, monkeypatch):
    monkeypatch.setattr(event_log, "_log", event_log.EventLog(str(tmp_path)))
    return tmp_path


def _events(run_dir) -> list[dict]:
    lines = (run_dir / EVENTS_FILE).read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["ev"] == EV_WORKER_ATTRS]


def test_start_and_end_are_always_written_ticks_only_on_a_change_and_later_less_often(log, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(worker_attrs, "_now", lambda: clock[0])
    ds = DS()
    counter = worker_attrs.AttrCounter(ds, 0, 1)
    counter.read("start", 0)
    assert counter.due == 1000.0 + worker_attrs.INTERVAL_S
    counter.tick(3)  # nothing changed: no event, the same interval
    clock[0] += 1
    ds[0], ds[1]
    counter.tick(5)  # changed: an event, the next one a second later (the worker's first STEADY_S)
    assert counter.due == 1001.0 + worker_attrs.INTERVAL_S and counter.interval == worker_attrs.INTERVAL_S
    counter.read("end", 9)  # unchanged, written all the same
    events = _events(log)
    assert [(e["phase"], e["batches"], e["attrs"]["self.cache"]) for e in events] == [
        ("start", 0, 0), ("tick", 5, 2), ("end", 9, 2)]  # fmt: skip
    assert all(e["loader"] == 0 and e["worker_id"] == 1 for e in events)
    clock[0] += worker_attrs.STEADY_S  # past it, the interval doubles at each change, up to its cap
    ds[2]
    counter.tick(10)
    assert counter.interval == 2 * worker_attrs.INTERVAL_S
    for _ in range(20):
        ds[len(ds.cache)]
        counter.tick(10)
    assert counter.interval == worker_attrs.MAX_INTERVAL_S


def test_a_failing_count_is_recorded_once_and_stops_the_counting(log, monkeypatch):
    counter = worker_attrs.AttrCounter(DS(), 0, 0)

    def broken(dataset):
        raise RuntimeError("boom")

    monkeypatch.setattr(worker_attrs, "counts", broken)
    counter.tick(1)
    counter.tick(2)
    assert counter.stopped and counter.due == float("inf")
    lines = [json.loads(x) for x in (log / EVENTS_FILE).read_text().splitlines()]
    errors = [e for e in lines if e["ev"] == "probe_error"]
    assert len(errors) == 1 and "worker_attrs.read" in json.dumps(errors[0])
