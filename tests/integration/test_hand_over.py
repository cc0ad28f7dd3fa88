"""The main process's hand-over clock on a real DataLoader with worker processes: one timed get per batch."""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset

from dlprobe.in_training.hand_over import HandOverClock, attach_to


class _Fields(Dataset):
    """Samples of `fields` small tensors, each `sleep_s` asleep first (a read)."""

    def __init__(self, fields: int = 32, sleep_s: float = 0.0) -> None:
        self.fields, self.sleep_s = fields, sleep_s

    def __len__(self) -> int:
        return 16 * 40

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        time.sleep(self.sleep_s)
        return {f"f{k}": torch.full((4,), float(i)) for k in range(self.fields)}


def test_every_batch_taken_from_the_workers_is_timed_once_and_none_of_the_wait_for_it():
    loader = DataLoader(_Fields(), batch_size=16, num_workers=2)
    iterator = iter(loader)
    clock = HandOverClock()
    assert attach_to(iterator, clock)
    waited = 0.0
    for _ in range(20):
        started = time.perf_counter()
        next(iterator)
        waited += time.perf_counter() - started
    assert clock.batches == _taken(iterator, 20)
    assert 0 < clock.seconds <= waited  # the hand-over is part of the time next() took, never more
    before = clock.batches
    assert attach_to(iterator, clock) and clock.batches == before  # attached once: a second attach wraps nothing again
    next(iterator)
    assert clock.batches == _taken(iterator, 21)
    del iterator


def _taken(iterator, returned: int) -> int:
    """Batches the iterator took off the result queue: those next() returned, and those that came before their turn
    and wait in its reorder buffer (a loaded machine lets one worker's batch overtake the other's)."""
    return returned + sum(1 for info in iterator._task_info.values() if len(info) == 2)


def test_the_wait_for_a_batch_to_be_built_is_not_hand_over():
    # one tensor a batch, 80 ms to build it: next() waits ~80 ms, the hand-over takes well under a millisecond (a
    # margin of hundreds: on a loaded machine it is still far under a quarter of the wait)
    loader = DataLoader(_Fields(fields=1, sleep_s=0.02), batch_size=4, num_workers=1)
    iterator = iter(loader)
    clock = HandOverClock()
    assert attach_to(iterator, clock)
    started = time.perf_counter()
    for _ in range(5):
        next(iterator)
    waited = time.perf_counter() - started
    assert clock.batches == 5 and clock.seconds < 0.25 * waited
    del iterator


def test_a_loader_without_workers_has_no_queue_to_time():
    assert not attach_to(iter(DataLoader(_Fields(), batch_size=16)), HandOverClock())


def test_the_clock_keeps_no_epoch_s_queue_alive_after_its_iterator_goes():
    # Without persistent workers every epoch makes a new result queue (a pipe: two descriptors). A clock that held
    # them made a long run under dlprobe run out of descriptors; torch frees each when its iterator goes.
    import gc
    import weakref

    loader = DataLoader(_Fields(fields=2), batch_size=16, num_workers=2)
    clock = HandOverClock()
    gone, timed = [], []
    for _ in range(3):
        iterator = iter(loader)
        assert attach_to(iterator, clock)
        queue = weakref.ref(iterator._worker_result_queue)
        before = clock.batches
        for _ in range(4):
            next(iterator)
        timed.append(clock.batches - before)
        del iterator
        gc.collect()
        gone.append(queue() is None)
    assert gone == [True, True, True]
    assert min(timed) >= 4  # each epoch's new queue timed (a batch that came early is taken in too)
