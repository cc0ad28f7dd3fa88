"""The queueing curve tune's model follows between one worker and the cores bound."""

from __future__ import annotations

import pytest

from dlprobe.loader_model.queueing import closed_throughput


def test_one_worker_is_its_own_time_per_sample_and_many_reach_the_cores():
    curve = closed_throughput(32, think_s=1.5e-3, demand_s=0.5e-3, servers=2)
    assert curve[0] == pytest.approx(1 / 2e-3)
    assert curve[-1] == pytest.approx(2 / 0.5e-3, rel=0.001)
    assert all(b >= a * (1 - 1e-9) for a, b in zip(curve, curve[1:], strict=False))  # never falls with more workers


def test_workers_that_sleep_part_of_each_sample_bend_below_the_corner():
    curve = closed_throughput(32, think_s=1.5e-3, demand_s=0.56e-3, servers=2)
    bound = 2 / 0.56e-3
    corner6 = min(6 / 2.06e-3, bound)
    assert curve[5] == pytest.approx(0.74 * bound, abs=0.01 * bound)  # the corner says 81%
    assert curve[5] < 0.92 * corner6
    assert curve[11] >= 0.99 * bound


def test_workers_that_only_compute_fill_the_cores_at_the_cores():
    curve = closed_throughput(8, think_s=0.0, demand_s=1e-3, servers=2)
    assert curve[0] == pytest.approx(1000) and curve[1] == pytest.approx(2000) and curve[7] == pytest.approx(2000)


def test_no_cpu_read_is_a_straight_line():
    assert closed_throughput(3, think_s=2e-3, demand_s=0.0, servers=2) == pytest.approx([500, 1000, 1500])
