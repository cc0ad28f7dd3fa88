"""tune's view of the script's own loop: its step per sample, and the note it prints."""

from __future__ import annotations

import pytest

from dlprobe.in_training.loop_clock import LoopClock
from dlprobe.tune.loop import keeps_up, loop_seconds, loop_words


def test_the_loops_step_is_per_sample_as_the_trials_count_samples_else_by_the_batch_size():
    loop = {"loop_step_s": 0.032, "loop_steps": 8, "loop_cpu_share": 0.01}
    assert loop_seconds(loop, 16, []) == pytest.approx(0.002)
    # The trials' rates are in the samples they counted (8 a batch here, a packing collate or a batch_sampler):
    # the loop's step is divided by the same count; a failed trial's count is left out.
    trials = [{"status": "ok", "samples": 400, "batches": 50}, {"status": "ok", "samples": 80, "batches": 10},
              {"status": "crashed", "samples": 1, "batches": 10}]  # fmt: skip
    assert loop_seconds(loop, 16, trials) == pytest.approx(0.004)
    assert loop_seconds(loop, None, trials) == pytest.approx(0.004)
    assert loop_seconds({"loop_steps": 2, "loop_step_s": None}, 16, []) is None
    assert loop_seconds(None, 16, []) is None


def test_a_loader_keeps_up_at_the_headroom_over_the_loops_rate():
    loop_s = 0.030 / 16  # 533 samples/s
    assert keeps_up(1.25 * 533.4 * 0.95, loop_s, 0.05)
    assert not keeps_up(1.25 * 533.3 * 0.94, loop_s, 0.05)
    assert not keeps_up(10_000, None, 0.05)  # no loop timed: nothing keeps up with it


def test_the_note_names_the_step_and_warns_when_the_step_itself_takes_the_cores():
    quiet = loop_words({"loop_step_s": 0.03, "loop_steps": 8, "loop_cpu_share": 0.02}, 0.03 / 16)
    assert quiet is not None and "30.0 ms a batch (533 samples/s, 2% of a core)" in quiet
    assert "not the workers' to use" not in quiet
    busy = loop_words({"loop_step_s": 0.03, "loop_steps": 8, "loop_cpu_share": 0.95}, 0.03 / 16)
    assert busy is not None and "the step's 0.9 core(s) of CPU are not the workers' to use" in busy
    assert "not timed: 1 steady step(s)" in (loop_words({"loop_steps": 1}, None) or "")
    assert loop_words({}, None) is None  # not asked to time the loop: nothing to say
    # A loop that takes whatever comes (a few microseconds a step): its CPU share is noise and is not said.
    quick = loop_words({"loop_step_s": 2.9e-05, "loop_steps": 8, "loop_cpu_share": 1.12}, 2.9e-05 / 16)
    assert quick is not None and "0.03 ms a batch" in quick and "bounds nothing" in quick
    assert "core" not in quick


class _Clocks:
    """A wall clock and a CPU clock that move only when told."""

    def __init__(self) -> None:
        self.t, self.c = 100.0, 5.0

    def step(self, wall: float, cpu: float = 0.0) -> None:
        self.t += wall
        self.c += cpu


def _clock(steps: int, clocks: _Clocks) -> LoopClock:
    return LoopClock(loader=object(), loader_id=0, steps=steps, now=lambda: clocks.t, cpu=lambda: clocks.c)


def test_the_clock_leaves_the_first_step_out_and_takes_the_median_of_the_steps_asked_for():
    class Iterator:  # what the loop takes batches from (a weak reference is kept)
        pass

    it, clocks = Iterator(), _Clocks()
    clock = _clock(4, clocks)
    clock.asking()  # the first request: no step before it
    for wall in (5.0, 0.030, 0.031, 0.200, 0.029):  # a 5 s first step (compilation), one step that logged
        assert not clock.done()
        clock.returned(it)
        clocks.step(wall, cpu=wall / 10)
        clock.asking()
    assert clock.done() and clock.iterator is it
    assert clock.summary() == {"loop_steps": 4, "loop_step_s": pytest.approx(0.0305), "loop_cpu_share": 0.1}
    del it
    assert clock.iterator is None  # the loop's iterator is not kept alive by the clock


def test_slow_steps_are_taken_over_after_three_past_three_seconds_and_anything_past_ten():
    clocks = _Clocks()
    slow = _clock(8, clocks)
    slow.asking()
    for _ in range(3):  # the left-out step, then 2 steady steps of 2 s: 4 s of steady steps, but only 2 of them
        slow.returned(object)
        clocks.step(2.0)
        slow.asking()
    assert not slow.done()  # the 3 s count from the end of the step left out: 4 s, but 2 steps are too few
    slow.returned(object)
    clocks.step(2.0)
    slow.asking()
    assert slow.done() and slow.summary()["loop_steps"] == 3
    clocks = _Clocks()
    stuck = _clock(8, clocks)
    stuck.returned(object)
    clocks.step(10.5)  # a first step of 10.5 s: the trials need the budget more than the loop needs timing
    assert stuck.done() and stuck.summary() == {"loop_steps": 0, "loop_step_s": None, "loop_cpu_share": None}


def test_a_new_pass_over_the_loader_goes_on_timing_without_the_gap_between_passes():
    clocks = _Clocks()
    clock = _clock(8, clocks)
    clock.returned(object)  # a peek: next(iter(loader))
    clocks.step(60.0)  # ...then a minute of the script's own set-up
    assert clock.new_pass() and clock.new_pass()  # the loop's first and second epochs
    clock.asking()
    assert clock.walls == []  # no step measured across the passes
    assert not clock.new_pass()  # a fourth pass: taken over with what it timed
