"""A worker's memory and the memory the workers may use: one answer for `run`'s findings, `tune`'s trials (and its
search inside the training process), `attach` and the job's node totals. Pure functions on plain numbers: each
caller reads its own evidence (a run's samples, a trial's window, an attached tree) and asks these. A worker's memory
at the end of an epoch is memory_growth.py's projection (bent toward its ceiling), not a line from its steady growth."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlprobe.loader_model.limits import MEMORY_SHARE


@dataclass(frozen=True)
class Growth:
    """A worker's steady growth: bytes over `seconds` of its steady part (the later half's rate over the whole part)."""

    bytes: int
    seconds: float


def steady_growth(
    readings: list[tuple[float, int]], since: float = float("-inf"), until: float = float("inf")
) -> Growth | None:
    """(growth, seconds) of a worker's memory over its steady part, the readings from `since` to `until`; None with
    fewer than two readings there (growth there was not seen).

    Fitted on the later half only: a load that ends after the first batch (a worker still filling its table while
    another delivers) would read as growth over the whole window; growth that goes on holds its rate in the later half,
    a finished load does not; and at most what it rose over the part (the later half's rate over the whole part doubles
    a step taken late in it). With two readings there is no later half: their difference."""
    steady = sorted((t, v) for t, v in readings if since <= t <= until)
    if len(steady) < 2 or steady[-1][0] <= steady[0][0]:
        return None
    span = steady[-1][0] - steady[0][0]
    if len(steady) == 2:
        return Growth(max(0, steady[1][1] - steady[0][1]), span)
    mid = next((t, v) for t, v in steady if t >= steady[0][0] + span / 2)
    if steady[-1][0] <= mid[0]:
        return None
    rate = max(0, steady[-1][1] - mid[1]) / (steady[-1][0] - mid[0])
    # Never more than it rose over the steady part: a step late in it (a batch buffer kept, an arena) would read as
    # twice its size at the later half's rate, a growth that was not there.
    rose = max(0, max(v for _, v in steady) - steady[0][1])
    return Growth(min(int(rate * span), rose), span)


def memory_for_workers(
    limit: int | None, held_apart: int | None, available: int | None, workers_held: int = 0
) -> int | None:
    """The memory the workers may use, the tighter of: the memory limit less what the job holds besides the workers
    (`held_apart`: the parent, the supervisor's share, what the kernel charges apart; the page cache it drops before
    it kills is not held), and the memory the machine has available plus what the workers already hold (available
    memory was read with them in it). None where neither was read."""
    options = []
    if limit and held_apart is not None:
        options.append(int(limit - held_apart))
    if available is not None:
        options.append(int(available + workers_held))
    return min(options) if options else None


def workers_that_fit(budget: int | None, per_worker: int, reserve: int | None) -> int | None:
    """Workers of `per_worker` bytes that fit `budget`, each with its measured `reserve`, or (not measured: None) in
    MEMORY_SHARE of it; None without a budget or a size."""
    if not budget or per_worker <= 0:
        return None
    if reserve is None:
        return max(0, int(MEMORY_SHARE * budget // per_worker))
    return max(0, budget // (per_worker + reserve))


def fits(budget: int | None, projected: int | None, workers: int, reserve: int | None) -> bool | None:
    """Whether `projected` bytes for `workers` workers (and what they put in /dev/shm) fit `budget`: with each worker's
    measured reserve kept free, or (not measured) in MEMORY_SHARE of it, as `workers_that_fit` counts; None where the
    budget or the projection is unknown."""
    if budget is None or projected is None:
        return None
    if reserve is None:
        return projected <= MEMORY_SHARE * budget
    return projected + workers * reserve <= budget


# One-time steps: a jump between two consecutive USS readings, at least STEP_MIN_BYTES and STEP_FACTOR times what the
# worker's steady rate (its other intervals' rises over their time) gives over that interval, not continued: each
# neighbouring interval rose by less than STEP_CONTINUED of it. A full garbage collection touches the header of every
# object the parent holds and copies those pages into the worker in one go (35 MiB at one reading of the healthy numpy
# loader of tests/scripts/numpy_dataset.py, at a batch that depends on allocation counts and the machine's load, in
# some runs and not others); copy-on-write of a list of dicts rises over several readings and is growth, not a step.
STEP_MIN_BYTES = 8 << 20
STEP_FACTOR = 4.0
STEP_CONTINUED = 0.25
STEADY_INTERVAL_MIN_S = 0.5  # a collection step's steady rate is read over intervals this long at least


# A step's cause where the run shows its mechanism: the worker's full garbage collection ran inside the rise.
FULL_COLLECTION = "full garbage collection"


@dataclass(frozen=True)
class Step:
    """A one-time rise of a worker's memory: between the readings at `t_before` and `t`, by `bytes`; `cause` where
    the run timed what happened inside it (FULL_COLLECTION), else empty."""

    t_before: float
    t: float
    bytes: int
    cause: str = ""
    held: bool = False  # read before the steady part began: in what the worker held at the start, not its growth


def _steady_rate(rises: list[tuple[float, float, int]], apart: set[int], after: float) -> float:
    """Bytes per second of the intervals not in `apart`, those after `after` where there are any."""
    others = [(a, b, r) for j, (a, b, r) in enumerate(rises) if j not in apart and b > a]
    steady = [(a, b, r) for a, b, r in others if b > after] or others
    spent = sum(b - a for a, b, _ in steady)
    return sum(max(0, r) for _, _, r in steady) / spent if spent > 0 else 0.0


def _collection_steps(
    rises: list[tuple[float, float, int]],
    collections: list[tuple[float, float]],
    after: float,
    read_ends: dict[float, float],
) -> tuple[list[Step], set[int]]:
    """The rises inside which one of the worker's full garbage collections ran: its first copies every page of the
    objects it inherited, wherever the sparse readings put it (right after the first batch too). A collection that
    spanned a reading makes the two rises around it one step, its whole rise, at least STEP_FACTOR times the steady
    rate of the other intervals (a dataset's own growth goes on through it); a rise no faster than that is none, nor
    one the steady reading next to it continues (a quarter of it or more: growth, whatever ran inside it).
    A reading spans its stamp to the end of its read (`read_ends`): one stamped 8 ms before a collection began but
    read after it held a third of its copy, and the step read from it alone, 25 of 37 MiB, left 11 MiB of copy in
    the worker's steady peak (a baseline gate's false alarm)."""
    steps: list[Step] = []
    used: set[int] = set()
    for began, ended in sorted(collections):
        window = {j for j, (a, b, _) in enumerate(rises) if read_ends.get(b, b) >= began and a < ended}
        if not window or window & used:
            continue
        t0, t1 = rises[min(window)][0], rises[max(window)][1]
        # the rate of the intervals read wholly after the first batch, of the sampler's usual spacing: the readings
        # taken straight after the workers start hold the first batches' own allocations (2.4 MiB in 0.07 s on a busy
        # machine), a rate a 34 MiB copy over a 3 s interval is not 4 times of
        whole = [(a, b, r) for j, (a, b, r) in enumerate(rises)
                 if j not in window and a >= after and b - a >= STEADY_INTERVAL_MIN_S]  # fmt: skip
        rate = _steady_rate(whole, set(), after) if whole else _steady_rate(rises, window, after)
        rise = sum(rises[j][2] for j in window)
        # the whole rise is the step, as the readings' own steps are: a dataset growing through it would have
        # continued in the neighbours (refused below), and a rate read from a few noisy intervals, stretched over a
        # long interval, took up to 8 MiB off a 37 MiB copy on a busy machine (a baseline's peak rule then failed).
        # A rise that goes on in the steady readings next to it is growth the collection happened to fall in: the
        # readings cannot tell the copy from it (the interval before the first batch is start-up, not a neighbour)
        neighbours = [rises[j][2] for j in (min(window) - 1, max(window) + 1) if 0 <= j < len(rises)
                      and rises[j][0] >= after]  # fmt: skip
        if any(r >= STEP_CONTINUED * rise for r in neighbours):
            continue
        if rise >= STEP_MIN_BYTES and rise >= STEP_FACTOR * rate * (t1 - t0):
            # before the steady part's first reading it is held from the start, not growth; it is still apart
            # from the worker's peak, wherever the readings put it
            steps.append(Step(t0, t1, rise, FULL_COLLECTION, held=t0 < after))
            used |= window
    return steps, used


def find_steps(
    readings: list[tuple[float, int]],
    after: float = float("-inf"),
    collections: list[tuple[float, float]] | None = None,
    read_ends: dict[float, float] | None = None,
) -> list[Step]:
    """The one-time steps among a worker's readings (time, bytes), those whose rise ended after `after` (its first
    batch: a load at start is growth the worker holds, not a step). The steady rate is that of the other intervals
    after `after`, their rises over their time (the start's fast allocations would hide a step); a rise at the last
    reading is a step where the one before it was not part of it (a short run often ends before the next reading of a
    still worker). A reading taken while the step happened splits it in two consecutive rises, neither at the steady
    rate, are one step. Either comes after an interval read wholly in the steady part: copy-on-write of a dataset
    rises from the first batch on, in one or two big rises on a busy machine's sparse readings, and is growth.
    The worker's timed full garbage collections (`collections`, (start, stop)) come first: a rise they ran in is a
    step by its mechanism (_collection_steps), whatever its place among the readings; `read_ends` maps a reading's
    time to when its read ended, where that was later. Pure: no I/O."""
    pts = sorted(readings)
    rises = [(pts[i - 1][0], pts[i][0], pts[i][1] - pts[i - 1][1]) for i in range(1, len(pts))]
    steps, used = _collection_steps(rises, collections or [], after, read_ends or {})
    for width in (2, 1):
        for i in range(len(rises) - width + 1):
            window = set(range(i, i + width))
            t0, t1 = rises[i][0], rises[i + width - 1][1]
            rise = sum(rises[j][2] for j in window)
            if window & used or t1 <= after or rise < STEP_MIN_BYTES:
                continue
            rate = _steady_rate(rises, window, after)
            if rise < STEP_FACTOR * rate * (t1 - t0):
                continue
            if not (i >= 1 and rises[i - 1][0] >= after):
                continue  # a step comes after a reading of the steady part: a rise from the first batch on is growth
            if width == 2 and not all(r >= STEP_FACTOR * rate * (b - a) for a, b, r in rises[i : i + 2]):
                continue  # a step split by a reading: neither part is the steady rate
            neighbours = [rises[j][2] for j in (i - 1, i + width) if 0 <= j < len(rises)]
            if not neighbours or any(r >= STEP_CONTINUED * rise for r in neighbours):
                continue  # one that goes on (or the only rise there is): growth
            steps.append(Step(t0, t1, rise))
            used |= window
    return sorted(steps, key=lambda s: s.t)


def spread(values: list[float]) -> float | None:
    """The sample standard deviation of a metric's values across a run's workers (and epochs, and merged runs): what
    one reading of it moves by on this machine; None with fewer than two values."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
