"""Bounding a series for a page: each bucket of the time axis keeps its first, min, max and last point."""

from __future__ import annotations

from bisect import bisect_right


def keep_indices(xs: list[float], ys: list[float], max_points: int) -> list[int]:
    """Indices of at most max_points points: each bucket of the time axis keeps its first, min, max and last, so
    peaks stay. xs must be sorted; the work per point is done in C (bisect, min/max over a range)."""
    n = len(xs)
    if n <= max_points or max_points < 8:
        return list(range(n))
    buckets = max_points // 4  # up to four points each
    x0, span = xs[0], (xs[-1] - xs[0]) or 1.0
    get = ys.__getitem__
    out: list[int] = []
    start = 0
    for b in range(buckets):
        end = n if b == buckets - 1 else bisect_right(xs, x0 + span * (b + 1) / buckets, start)
        if end > start:
            span_idx = range(start, end)
            out.extend(sorted({start, min(span_idx, key=get), max(span_idx, key=get), end - 1}))
        start = end
    return out


def downsample(points: list[tuple[float, float]], max_points: int) -> list[tuple[float, float]]:
    """The points keep_indices keeps."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    return [points[i] for i in keep_indices(xs, ys, max_points)]
