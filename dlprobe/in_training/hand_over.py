"""The main process's time taking each batch off the workers' result queue: the hand-over, not the wait for a batch."""

from __future__ import annotations

import time
import weakref
from typing import Any

CLOCK_MARK = "_dlprobe_hand_over_clock"  # set on a queue already timed (by the clock it names)


class HandOverClock:
    """Seconds the process spent receiving and unpickling batches from the workers' result queue.

    torch's `Queue.get` polls until a batch is there (the wait for the workers), then reads and unpickles it; the
    unpickling maps each tensor's shared memory, and under the default file_descriptor strategy fetches each
    tensor's descriptor from its worker over a socket, a round trip per tensor. That part is timed: from the poll
    that found a batch to `get` returning. It runs on one thread (the main one, or the pin-memory thread), one batch
    at a time, so it bounds the rate whatever the count of workers, and part of it is asleep (the worker's reply),
    which the main process's CPU time does not show."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.batches = 0
        self._found_at: float | None = None

    def attach(self, queue: Any) -> bool:
        """Wraps this queue object's own `_poll` and `get` (the instance only, once); False where it has neither.

        Holds no reference to the queue, and makes no cycle through it: without persistent workers each epoch makes
        a new queue, a pipe's two descriptors that torch frees when the iterator goes, and the user's training must
        not run out of them under the probe."""
        if getattr(queue, CLOCK_MARK, None) is self:
            return True  # persistent workers: a new pass reuses the iterator and its queue
        poll, get = getattr(queue, "_poll", None), getattr(type(queue), "get", None)
        if not callable(poll) or not callable(get):
            return False
        owner = weakref.ref(queue)  # `get` unbound, called on a weak reference: the queue's dict holds no cycle

        def timed_poll(*args: Any, **kwargs: Any) -> Any:
            found = poll(*args, **kwargs)  # the reader connection's own poll, not a method of the queue
            if found:
                self._found_at = time.perf_counter()
            return found

        def timed_get(*args: Any, **kwargs: Any) -> Any:
            self._found_at = None
            item = get(owner(), *args, **kwargs)
            if self._found_at is not None:  # a get without a poll (no timeout) says nothing about its parts
                self.seconds += time.perf_counter() - self._found_at
                self.batches += 1
            return item

        queue._poll, queue.get = timed_poll, timed_get
        setattr(queue, CLOCK_MARK, self)
        return True


def attach_to(iterator: Any, clock: HandOverClock) -> bool:
    """Times a multiprocessing iterator's result queue (the one the main or the pin-memory thread reads) on
    `clock`; False without one (no workers, thread workers)."""
    queue = getattr(iterator, "_worker_result_queue", None)
    return queue is not None and clock.attach(queue)
