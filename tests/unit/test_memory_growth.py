"""The worker memory model (dlprobe/loader_model/memory_growth.py) on readings made up from known curves."""

from __future__ import annotations

import math

from dlprobe.loader_model.memory_growth import (
    BENDING,
    ENDED,
    FEW_READINGS,
    FLAT,
    STRAIGHT,
    Ceiling,
    project_growth,
    tightest,
)

MiB = 1 << 20


def _readings(curve, until: float, n: int = 20) -> list[tuple[float, int]]:
    return [(until * i / (n - 1), int(curve(until * i / (n - 1)))) for i in range(n)]


def _cow(x: float) -> float:
    """Copy-on-write of a shuffled epoch: 160 MiB of pages, each copied once any of its objects is read."""
    return 160 * MiB * (1 - math.exp(-4 * x))


def test_bending_growth_is_projected_near_its_end_not_along_the_first_slope():
    p = project_growth(_readings(_cow, 0.25), 0.25)
    end = _cow(1.0)
    assert p.shape == BENDING
    # the least bent of the curves the readings allow: on the high side of the truth, never far
    assert 0.98 < p.projected_bytes / end < 1.10
    assert p.low_bytes <= end <= p.high_bytes
    straight = _cow(0.25) / 0.25  # what a straight line from a quarter of the epoch says: far above
    assert p.high_bytes < straight


def test_straight_growth_stays_straight():
    p = project_growth(_readings(lambda x: 200 * MiB * x, 0.25), 0.25)
    assert p.shape == STRAIGHT
    assert abs(p.projected_bytes / (200 * MiB) - 1) < 0.05


def test_no_projection_passes_its_ceiling():
    ceiling = Ceiling(100 * MiB, "the parent's anonymous memory")
    p = project_growth(_readings(lambda x: 400 * MiB * x, 0.25), 0.25, ceiling)
    assert p.projected_bytes == p.high_bytes == 100 * MiB
    assert p.low_bytes <= 100 * MiB
    assert p.evidence()["ceiling_source"] == "the parent's anonymous memory"
    # even a reading above the ceiling (a sample's error) does not carry the projection over it
    over = project_growth([(0.1, 10 * MiB), (0.2, 120 * MiB)], 0.2, ceiling)
    assert over.projected_bytes <= 100 * MiB and over.high_bytes <= 100 * MiB


def test_never_below_what_was_measured():
    falling = [(0.05 * i, (30 - i) * MiB) for i in range(6)]
    p = project_growth(falling, 0.3)
    assert p.measured_bytes == 30 * MiB and p.projected_bytes >= 30 * MiB and p.low_bytes >= 30 * MiB


def test_flat_after_start_is_flat():
    p = project_growth([(0.02 * i, 40 * MiB) for i in range(1, 10)], 0.2)
    assert p.shape == FLAT and p.projected_bytes == 40 * MiB


def test_an_ended_epoch_is_measured_not_projected():
    p = project_growth(_readings(_cow, 1.0), 1.0, Ceiling(500 * MiB, "x"))
    assert p.shape == ENDED and p.projected_bytes == p.measured_bytes == p.low_bytes == p.high_bytes


def test_few_readings_give_a_range_up_to_the_straight_line():
    p = project_growth([(0.1, 10 * MiB), (0.2, 20 * MiB)], 0.2)
    assert p.shape == FEW_READINGS
    assert p.low_bytes == 20 * MiB and p.high_bytes == p.projected_bytes == 100 * MiB


def test_noisy_readings_widen_the_range_around_the_truth():
    jitter = [0, 3, -2, 4, -3, 1, -4, 2, 0, -1, 3, -2]
    pts = [(x, y + jitter[i % len(jitter)] * MiB) for i, (x, y) in enumerate(_readings(_cow, 0.5, 24))]
    p = project_growth(pts, 0.5)
    assert p.low_bytes <= _cow(1.0) <= p.high_bytes
    assert p.high_bytes - p.low_bytes > 0


def test_the_tightest_known_ceiling():
    assert tightest(None, Ceiling(3, "a"), Ceiling(2, "b"), Ceiling(0, "unread")) == Ceiling(2, "b")
    assert tightest(None) is None


def test_a_projection_says_how_far_its_readings_reach_not_where_the_loop_was():
    # a worker read three times in its first 1% of the epoch while the loop is at 10%: too few to say how it bends,
    # so the straight line is the projection (never below what may come) and what was measured the range's foot
    p = project_growth([(0.0, 0), (0.001, MiB // 2), (0.01, 3 * MiB // 2)], 0.1)
    assert p.measured_at == 0.01 and p.shape == FEW_READINGS
    assert p.low_bytes == 3 * MiB // 2 and p.projected_bytes == p.high_bytes > 100 * MiB
