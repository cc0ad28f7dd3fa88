"""A DataLoader worker's memory over an epoch: what it held at start, plus growth that bends toward a ceiling.

A forked worker cannot copy more than the pages the objects it touches live on, so its copy-on-write growth slows as
it finds fewer pages it has not copied yet: with a shuffled sampler, a page of m objects is copied once any of them is
read, so after a share x of the epoch a page is still shared with probability (1 - x/W)^m, and the growth follows
C * (1 - exp(-k x)). A straight line from the first minutes overstates the end several times over. New allocations (a
cache that fills) grow about as fast as the samples come, which is the same curve with k near 0.

`project_growth` fits `a + s * (1 - exp(-k x)) / k` (a: a step at start, s: the first slope, k: how fast it bends; k
= 0 is the straight line) on the readings so far, for each k on a grid, and keeps every k whose fit is as good as
the best within the readings' noise: their values at the epoch's end are the projection's range, the least bent of
them its value (a bend is believed where the readings show it). No projection passes its ceiling (what the worker
could copy, or a limit the kernel enforces) nor falls below what was already measured.

Pure functions on plain numbers (bytes, epoch fractions): no I/O, no run directory, safe anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# The bends tried, in units of 1/epoch: 0 (the straight line) then from barely bent to done within 2% of an epoch.
BENDS = (0.0, *(0.25 * 1.1**i for i in range(72)))
MIN_READINGS = 4  # three numbers are fitted: fewer readings give a straight line and a range, not a fit
NOISE_FLOOR_BYTES = 1 << 20  # allocator arenas and the sampler's timing move a reading by about this much
ACCEPT_SIGMAS = 2.0  # fits whose error is within this many noise units of the best one are as good

ENDED = "ended"  # the epoch (or the worker's life in it) was over: the growth is measured, not projected
FEW_READINGS = "few-readings"  # too few readings to fit: the straight line is the top of the range
BENDING = "bending"  # the growth slows down: the fit bends toward its end value
STRAIGHT = "straight"  # the growth goes on at the rate it had (an allocation that keeps pace with the samples)
FLAT = "flat"  # no growth after the start


@dataclass(frozen=True)
class Ceiling:
    """A size the growth can be shown not to pass, and what it is (the parent's anonymous memory, a limit)."""

    bytes: int
    source: str


@dataclass(frozen=True)
class Projection:
    """A worker's growth at the end of its epoch: measured so far, projected (best fit) and the range the readings
    allow, each at most `ceiling` and at least `measured_bytes`; `measured_at` is how far into the epoch the last
    reading was (0-1)."""

    measured_bytes: int
    projected_bytes: int
    low_bytes: int
    high_bytes: int
    ceiling: Ceiling | None
    measured_at: float
    shape: str
    readings: int

    def evidence(self) -> dict[str, object]:
        """The projection as report evidence: the numbers, the ceiling that bounded it and where it was measured."""
        return {
            "measured_bytes": self.measured_bytes,
            "projected_bytes": self.projected_bytes,
            "projected_low_bytes": self.low_bytes,
            "projected_high_bytes": self.high_bytes,
            "ceiling_bytes": self.ceiling.bytes if self.ceiling else None,
            "ceiling_source": self.ceiling.source if self.ceiling else None,
            "measured_at_epoch_fraction": round(self.measured_at, 3),
            "shape": self.shape,
            "readings": self.readings,
        }


def _bent(x: float, k: float) -> float:
    """(1 - e^-kx) / k, which is x at k = 0: the growth per unit of first slope after a share x of the epoch."""
    return x if k == 0 else -math.expm1(-k * x) / k


def _fit(points: list[tuple[float, float]], k: float) -> tuple[float, float, float]:
    """(a, s, squared error) of the least-squares fit of a + s * _bent(x, k), s >= 0 (memory that shrinks is flat)."""
    n = len(points)
    bs = [_bent(x, k) for x, _ in points]
    mb, my = sum(bs) / n, sum(y for _, y in points) / n
    sbb = sum((b - mb) ** 2 for b in bs)
    s = max(0.0, sum((b - mb) * (y - my) for b, (_, y) in zip(bs, points, strict=True)) / sbb) if sbb > 0 else 0.0
    a = my - s * mb
    return a, s, sum((y - a - s * b) ** 2 for b, (_, y) in zip(bs, points, strict=True))


def _bounded(value: float, measured: int, ceiling: Ceiling | None) -> int:
    """A projected value no lower than what was measured and no higher than the ceiling (which wins: a reading above
    a ceiling is the reading's error, the ceiling is a bound the kernel or the parent's size enforces)."""
    value = max(value, measured)
    return int(min(value, ceiling.bytes) if ceiling else value)


def project_growth(points: list[tuple[float, int]], measured_at: float, ceiling: Ceiling | None = None) -> Projection:
    """Project a worker's growth to the end of its epoch from `points`, (share of the epoch done, bytes grown since
    its start) for each reading; `measured_at` is the share the loop had done (1 or more: the epoch ended). The
    projection's own `measured_at` is its last reading's: a worker whose memory stopped moving is read rarely, and a
    projection from 1% of the epoch says so even when the loop is at 10%."""
    pts = sorted((max(0.0, x), float(y)) for x, y in points)
    measured = max(0, int(max((y for _, y in pts), default=0)))
    measured_at = max(0.0, min(1.0, measured_at))
    if measured_at >= 1.0 or not pts:
        end = _bounded(measured, measured, ceiling)
        return Projection(measured, end, end, end, ceiling, measured_at, ENDED, len(pts))
    measured_at = pts[-1][0] if pts[-1][0] < measured_at else measured_at  # how far its readings reach, not the loop
    if len(pts) < MIN_READINGS:
        # No fit: what was measured is the bottom, the straight line the top, drawn through the readings after the
        # epoch's first batch where two are (a load before it, all at 0, is a step, not a slope).
        after = [p for p in pts if p[0] > 0]
        (x0, y0), (x1, y1) = (after[0], after[-1]) if len(after) >= 2 else (pts[0], pts[-1])
        slope = max(0.0, (y1 - y0) / (x1 - x0)) if x1 > x0 else 0.0
        high = _bounded(y1 + slope * (1.0 - x1), measured, ceiling)
        low = _bounded(measured, measured, ceiling)
        return Projection(measured, high, low, high, ceiling, measured_at, FEW_READINGS, len(pts))
    fits = [(k, *_fit(pts, k)) for k in BENDS]
    best_err = min(f[3] for f in fits)
    noise = max(best_err / max(1, len(pts) - 3), float(NOISE_FLOOR_BYTES) ** 2)
    good = [f for f in fits if f[3] <= best_err + ACCEPT_SIGMAS**2 * noise]
    # The least bent of the good fits is the projection: a bend is believed only where the readings show it beyond
    # their noise (a cache that fills, read a few times early, must not be bent by one low reading), and the range
    # keeps every bend they allow.
    best_k, best_a, best_s, _ = min(good, key=lambda f: f[0])
    ends = [_bounded(a + s * _bent(1.0, k), measured, ceiling) for k, a, s, _ in good]
    projected = _bounded(best_a + best_s * _bent(1.0, best_k), measured, ceiling)
    if best_s * _bent(1.0, best_k) - best_s * _bent(measured_at, best_k) < NOISE_FLOOR_BYTES:
        shape = FLAT if best_s * _bent(measured_at, best_k) < NOISE_FLOOR_BYTES else BENDING
    else:
        shape = STRAIGHT if best_k * measured_at < 0.5 else BENDING
    return Projection(measured, projected, min(ends), max(ends), ceiling, measured_at, shape, len(pts))


def tightest(*ceilings: Ceiling | None) -> Ceiling | None:
    """The lowest of the ceilings that are known (a positive size), or None."""
    known = [c for c in ceilings if c is not None and c.bytes > 0]
    return min(known, key=lambda c: c.bytes) if known else None


@dataclass(frozen=True)
class WorkerProjection:
    """A worker's private memory over its epoch, by kind of page: what it had grown by its start (a load in
    worker_init_fn, its first batch), then its copies of the parent's pages and its new allocations, each projected
    to the epoch's end under its own ceiling (a copy cannot pass the parent's anonymous memory; an allocation the
    memory limit). Runs recorded without page kinds have USS growth only, projected as allocations."""

    held_at_start_bytes: int
    copies: Projection | None
    allocations: Projection

    @property
    def projected_bytes(self) -> int:
        return self.held_at_start_bytes + (self.copies.projected_bytes if self.copies else 0) + (
            self.allocations.projected_bytes)  # fmt: skip

    @property
    def range_bytes(self) -> tuple[int, int]:
        parts = [p for p in (self.copies, self.allocations) if p is not None]
        return (self.held_at_start_bytes + sum(p.low_bytes for p in parts),
                self.held_at_start_bytes + sum(p.high_bytes for p in parts))  # fmt: skip

    @property
    def measured_at(self) -> float:
        """How far into the epoch the projection was measured: the earlier of its parts'."""
        return min(p.measured_at for p in (self.copies, self.allocations) if p is not None)

    @property
    def ceiling(self) -> Ceiling | None:
        """The ceiling that bounds the growth that matters most: the copies' where they were read, else the
        allocations'."""
        return self.copies.ceiling if self.copies is not None and self.copies.ceiling else self.allocations.ceiling

    def evidence(self) -> dict[str, object]:
        low, high = self.range_bytes
        return {
            "held_at_start_bytes": self.held_at_start_bytes,
            "projected_bytes": self.projected_bytes,
            "projected_low_bytes": low,
            "projected_high_bytes": high,
            "copies": self.copies.evidence() if self.copies else None,
            "allocations": self.allocations.evidence(),
        }


def project_worker_by_kind(
    points: list[tuple[float, int, int, int, int]],
    start: int,
    measured_at: float,
    parent_anon: Ceiling | None,
    limit: Ceiling | None,
) -> WorkerProjection:
    """A worker's projection from its readings by kind of page, in time order: (share of the epoch done,
    Private_Dirty, Anonymous, Pss_Shmem, Pss_File); `start` the first reading of its steady part, `parent_anon` what
    it could copy at most (the parent's anonymous memory at fork), `limit` the tightest memory limit.

    Copies are the private pages that are neither new anonymous memory nor shmem or file pages; new anonymous memory
    is an allocation. What it had grown by `start` is held, not projected."""
    _, d0, a0, sh0, f0 = points[0]
    cow = [(d - d0) - max(0, a - a0) - max(0, sh - sh0) - max(0, f - f0) for _, d, a, sh, f in points]
    new = [max(0, a - a0) for _, _, a, _, _ in points]
    shares = [p[0] for p in points]
    copies_left = Ceiling(max(0, parent_anon.bytes - max(0, cow[start])), parent_anon.source) if parent_anon else None
    copies = project_growth([(x, c - cow[start]) for x, c in zip(shares[start:], cow[start:], strict=True)],
                            measured_at, copies_left)  # fmt: skip
    allocations = project_growth(
        [(x, n - new[start]) for x, n in zip(shares[start:], new[start:], strict=True)], measured_at, limit
    )
    return WorkerProjection(max(0, cow[start]) + new[start], copies, allocations)


def project_worker_uss(points: list[tuple[float, int]], start: int, measured_at: float, limit: Ceiling | None) -> (
        WorkerProjection):  # fmt: skip
    """A worker's projection from its USS alone (runs recorded without page kinds), in time order: (share of the epoch
    done, USS) per reading; its growth from `start` on is projected as new memory (RSS never decides it)."""
    base = points[start][1] if points else 0
    held = max(0, base - points[0][1]) if points else 0
    return WorkerProjection(held, None, project_growth([(x, v - base) for x, v in points[start:]], measured_at, limit))


def worker_end_bytes(first_uss: int, peak_uss: int, projection: WorkerProjection) -> int:
    """A worker's private memory at the end of its epoch: its first reading plus the growth projected, never less than
    its peak so far (the one per-worker figure of run's advice, attach's growth and tune's trials)."""
    return max(peak_uss, first_uss + projection.projected_bytes)


def epoch_share(made: int, batches_per_epoch: int | None, ended: bool = False) -> float:
    """The share of an epoch done after `made` batches: 1 once it ended or where its length is unknown (nothing left
    to project: what was measured is the end)."""
    if ended or not batches_per_epoch:
        return 1.0
    return min(1.0, max(made, 1) / batches_per_epoch)


def linear_clock(t0: float, t_now: float, fraction: float) -> Callable[[float], float]:
    """The share of the epoch done at a time, where only its start (`t0`) and the last batch (`t_now`, `fraction`
    of the epoch done then) are known: batches at an even pace in between."""
    if t_now <= t0:
        return lambda _t: fraction
    return lambda t: fraction * min(1.0, max(0.0, (t - t0) / (t_now - t0)))


def tightest_limit(cgroup_limit: int | None, mem_total: int | None, available: int | None) -> tuple[int, str] | None:
    """The tightest memory limit and its name: the cgroup's limit, MemTotal, or the most memory the machine had
    available (MemAvailable); None where none was read (run's findings and tune's search read it alike)."""
    found = [(int(v), name) for v, name in ((cgroup_limit, "cgroup limit"), (mem_total, "MemTotal"),
                                            (available, "MemAvailable")) if v]  # fmt: skip
    return min(found) if found else None


def limit_ceiling(limit: tuple[int, str] | None) -> Ceiling | None:
    """The tightest memory limit (bytes, its name) as a ceiling on a worker's new allocations."""
    return Ceiling(limit[0], f"the {limit[1]}") if limit else None
