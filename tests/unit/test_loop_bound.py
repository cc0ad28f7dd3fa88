"""The workers that keep a loop fed (rate.workers_to_feed: loop-bound's count, and run's input-bound advice's),
from a worker's build time and the loop's step."""

from __future__ import annotations

from dlprobe.loader_model.rate import workers_to_feed


def test_the_workers_needed_deliver_the_headroom_over_the_loops_step():
    assert workers_to_feed(0.005, 0.021) == 1  # one worker builds a batch in 5 ms, the loop takes one per 21 ms
    assert workers_to_feed(0.040, 0.020) == 3  # 2 would match the loop exactly: 1.25x asks for a third
    assert workers_to_feed(0.016, 0.020) == 1  # exactly 1.25x
    assert workers_to_feed(0.5, 0.0) == 1  # a loop of no measured step of its own: nothing to size against
