"""A worker's steady growth (loader_model/worker_memory.steady_growth): the later half's rate over the steady part,
never more than the worker rose over it (the figure run's findings extend and `dlprobe check` gates)."""

from __future__ import annotations

from dlprobe.loader_model.worker_memory import steady_growth

MiB = 1024 * 1024


def test_growth_that_goes_on_is_the_later_halfs_rate_over_the_whole_part():
    readings = [(float(t), 100 * MiB + 4 * MiB * t) for t in range(11)]
    grown = steady_growth(readings)
    assert grown is not None and (grown.bytes, grown.seconds) == (40 * MiB, 10.0)


def test_a_step_late_in_the_steady_part_counts_once_not_at_the_later_halfs_rate():
    # The clean numpy loader of tests/integration/test_check.py: a worker flat at 15 MiB, then 32 MiB more at 11.7 s
    # of its 16.7 s (a batch buffer kept); the later half's rate over the whole part said 69 MiB.
    readings = [(0.5, 15 * MiB), (4.2, 15 * MiB), (9.2, 16 * MiB), (11.7, 48 * MiB), (16.7, 48 * MiB)]
    grown = steady_growth(readings)
    assert grown is not None and grown.bytes == 33 * MiB


def test_a_load_done_in_the_first_half_is_not_growth():
    readings = [(0.0, 10 * MiB), (1.0, 300 * MiB), (5.0, 300 * MiB), (10.0, 301 * MiB)]
    grown = steady_growth(readings)
    assert grown is not None and grown.bytes <= 2 * MiB
