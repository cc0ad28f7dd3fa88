"""tune's view of the script's own loop: its step per sample, and the note it prints."""

from __future__ import annotations

import pytest

from dlprobe.tune.loop import loop_seconds, loop_words


def test_the_loops_step_is_per_sample_by_the_batch_size_or_what_the_trials_counted():
    loop = {"loop_step_s": 0.032, "loop_steps": 8, "loop_cpu_share": 0.01}
    assert loop_seconds(loop, 16, []) == pytest.approx(0.002)
    # A custom batch_sampler: the loader has no batch_size, the trials counted 8 samples a batch.
    trials = [{"samples": 400, "batches": 50}, {"samples": 80, "batches": 10}]
    assert loop_seconds(loop, None, trials) == pytest.approx(0.004)
    assert loop_seconds({"loop_steps": 0, "loop_step_s": None}, 16, []) is None
    assert loop_seconds(None, 16, []) is None


def test_the_note_names_the_step_and_warns_when_the_step_itself_takes_the_cores():
    quiet = loop_words({"loop_step_s": 0.03, "loop_steps": 8, "loop_cpu_share": 0.02}, 0.03 / 16)
    assert quiet is not None and "30.0 ms a batch (533 samples/s, 2% of a core)" in quiet
    assert "not the workers' to use" not in quiet
    busy = loop_words({"loop_step_s": 0.03, "loop_steps": 8, "loop_cpu_share": 0.95}, 0.03 / 16)
    assert busy is not None and "the step's 0.9 core(s) of CPU are not the workers' to use" in busy
    assert "was not timed" in (loop_words({"loop_steps": 0}, None) or "")
    assert loop_words({}, None) is None  # not asked to time the loop: nothing to say


def test_the_clock_leaves_the_first_step_out_and_is_done_after_the_steps_asked_for():
    from dlprobe.in_training.loop_clock import LoopClock

    class Iterator:  # what the loop takes batches from (a weak reference is kept)
        pass

    it = Iterator()
    clock = LoopClock(loader=object(), loader_id=0, steps=3)
    clock.asking()  # the first request: no step before it
    for _ in range(4):
        assert not clock.done()
        clock.returned(it, wait_s=0.001)
        clock.asking()
    # 4 batches handed over, 4 steps after them; the first left out
    assert clock.done() and len(clock.walls) == 3 and clock.iterator is it
    summary = clock.summary()
    assert summary["loop_steps"] == 3 and summary["loop_step_s"] is not None and summary["loop_step_s"] >= 0
    del it
    assert clock.iterator is None  # the loop's iterator is not kept alive by the clock
    assert LoopClock(object(), 0, 3).summary() == {"loop_steps": 0, "loop_step_s": None, "loop_cpu_share": None}
