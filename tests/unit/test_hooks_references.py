"""The probe's per-worker batch counter holds its iterator weakly: dropping the iterator frees it (and torch then
stops its workers) at once, with no garbage collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from dlprobe.in_training.loader_probe import LoaderProbe


class _Iterator:
    """torch's multiprocessing iterator as the counter meets it: workers, and _process_data told the worker."""

    def __init__(self) -> None:
        self._workers = [object(), object()]

    def _process_data(self, data: Any, worker_id: int) -> Any:
        return data


@pytest.fixture
def no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def test_counting_batches_per_worker_leaves_the_iterator_free_to_go(no_gc):
    probe = LoaderProbe(0)
    iterator = _Iterator()
    probe.count_worker_batches(iterator, new_iterator=True)
    assert iterator._process_data("batch", 1) == "batch"
    assert probe.worker_batches == [0, 1]
    gone = weakref.ref(iterator)
    del iterator
    assert gone() is None
