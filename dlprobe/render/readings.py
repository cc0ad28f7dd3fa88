"""What a memory chart may draw from a series of readings: each reading at its time, and between two readings only
what they tell (pure: plain numbers in, plain numbers out; shared by report.html's SVG and memory.png's matplotlib).

A sampler reads a process every so often; between two readings the memory was somewhere the readings do not show, so
a straight line from one to the next is a guess drawn as fact (a worker read at 12 s and 24 s did not grow evenly in
between). The span between two readings is drawn as a band from the lower to the higher of them: "somewhere about
here". And no reading is drawn above a limit the kernel enforces (a cgroup's memory limit): a sum of processes read
at different instants can pass it (a parent read before it forked its workers, summed with the workers read after),
the job's memory cannot; such a reading is drawn at the limit and counted, so the chart can say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class AsRead:
    """A series as the chart draws it: `points` each reading at its time (at most `bound`), `spans` (x0, x1, low, high)
    between each two neighbouring readings, `clipped` the readings that were above `bound` (drawn at it), `highest` the
    highest of them as read (None when none was)."""

    points: list[tuple[float, float]]
    spans: list[tuple[float, float, float, float]]
    clipped: int
    highest: float | None
    bound: float | None


def as_read(readings: Iterable[tuple[float, float]], bound: float | None = None) -> AsRead:
    """The readings in time order, each at most `bound` (a hard limit; None or 0: no bound), and the band between
    each two neighbours from the lower to the higher of them."""
    ordered = sorted((float(x), float(y)) for x, y in readings)
    limit = bound if bound and bound > 0 else None
    over = [y for _, y in ordered if limit is not None and y > limit]
    points = [(x, min(y, limit) if limit is not None else y) for x, y in ordered]
    spans = [
        (x0, x1, min(y0, y1), max(y0, y1))
        for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False)
        if x1 > x0  # two readings at one instant bound nothing in between
    ]
    return AsRead(points, spans, len(over), max(over) if over else None, limit)


def step_band(spans: list[tuple[float, float, float, float]]) -> tuple[list[float], list[float], list[float]]:
    """The spans as the x, lower and upper edges of one stepped band (matplotlib's fill_between(step="post")): each
    span's low and high hold from its start to the next reading."""
    if not spans:
        return [], [], []
    xs = [s[0] for s in spans] + [spans[-1][1]]
    lows = [s[2] for s in spans] + [spans[-1][2]]
    highs = [s[3] for s in spans] + [spans[-1][3]]
    return xs, lows, highs


def clipped_note(what: str, data: AsRead, limit_name: str, scale: float = 1.0, unit: str = "MiB") -> str | None:
    """The sentence a chart owes its reader when it drew readings at a limit they passed; None when none did."""
    if not data.clipped or data.highest is None or data.bound is None:
        return None
    n = data.clipped
    return (
        f"{n} reading{'s' if n > 1 else ''} of {what} above the {limit_name} ({data.bound * scale:,.0f} {unit}; up to "
        f"{data.highest * scale:,.0f} {unit} as read) drawn at the limit: the kernel keeps the memory under it, so a "
        "reading above it comes from processes read at different instants, not memory that was held"
    )
