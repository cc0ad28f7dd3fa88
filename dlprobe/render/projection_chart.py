"""The chart of a memory projection: what the workers grew by when they were read, the range the projection allows
at the epoch's end (a band), the ceiling it was held under (dashed) and how far into the epoch it was measured.

Drawn from the findings' evidence only (cow-growth's totals, or too-many-workers' per-worker rows, both from
`loader_model/memory_growth.py`), on an axis of the epoch's share, the unit the projection is made in: the epoch's
end has no time until it comes, and a time axis stretched to a guessed end would make a guess of the readings too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.report.schema import FindingEntry
from dlprobe.render.readings import as_read
from dlprobe.render.svg import Band, Chart, Line, Readings
from dlprobe.units import MiB, format_bytes

PROJECTION_COLOR = "#D55E00"
MEASURED_COLOR = "#0072B2"
LIMIT_ON_SCALE = 3.0  # a limit more than this many times the chart's other values is said, not drawn (it flattens)


@dataclass(frozen=True)
class ProjectionView:
    """One loader's workers' growth: read at the start and at `measured_at` (a share of the epoch), projected to its
    end (bytes); `ceiling` what the projection could not pass and why, `limit` the memory limit and its kind."""

    code: str
    loader_id: int | None
    workers: int
    start_bytes: int
    measured_bytes: int
    measured_at: float
    projected_bytes: int
    low_bytes: int
    high_bytes: int
    ceiling: tuple[int, str] | None
    limit: tuple[int, str] | None


HARD_LIMITS = ("cgroup limit", "cgroup", "MemTotal")  # limits the kernel enforces (MemAvailable is not one)


def _rows_ceiling(rows: list[Mapping[str, Any]], limit: tuple[int, str] | None) -> tuple[int, str] | None:
    """The ceiling that bounded the kind of growth that dominates: for copies (copy-on-write), what the rows' workers
    could hold by copying the parent's pages (each one's start plus its copies' ceiling); for new allocations, the
    memory limit (each worker's allocations were held under it, and all of them together are too). None when the
    run does not say (no page kinds, no limit read)."""
    projections = [r["projection"] or {} for r in rows]
    copies: list[Mapping[str, Any]] = [c for p in projections if (c := p.get("copies"))]
    allocations: list[Mapping[str, Any]] = [a for p in projections if (a := p.get("allocations"))]
    copied = sum(int(c.get("measured_bytes") or 0) for c in copies)
    allocated = sum(int(a.get("measured_bytes") or 0) for a in allocations)
    if allocated > copied:
        return (limit[0], f"ceiling: the {limit[1]}, what new allocations cannot pass") if limit else None
    if not rows or len(copies) < len(rows) or not all(c.get("ceiling_bytes") for c in copies):
        return None
    total = sum(int(p.get("held_at_start_bytes") or 0) + int(c["ceiling_bytes"])
                for p, c in zip(projections, copies, strict=True))  # fmt: skip
    each = max(int(c["ceiling_bytes"]) for c in copies)
    source = str(copies[0]["ceiling_source"])
    who = f"{len(rows)} workers" if len(rows) > 1 else "the worker"
    return total, f"ceiling: what {who} could copy ({source}, {format_bytes(each)} each, after their start)"


def _limit(ev: Mapping[str, Any]) -> tuple[int, str] | None:
    return (int(ev["limit_bytes"]), str(ev.get("limit_kind") or "memory limit")) if ev.get("limit_bytes") else None


def _cow_view(finding: FindingEntry) -> ProjectionView | None:
    ev: Mapping[str, Any] = finding["evidence"]
    if ev.get("projected_total_bytes") is None or ev.get("measured_at_epoch_fraction") is None:
        return None
    rows = [r for r in ev.get("workers") or [] if r.get("counted") and r.get("projection")]
    limit = _limit(ev)
    return ProjectionView(
        code=finding["code"], loader_id=finding["loader_id"], workers=int(ev.get("counted_workers") or len(rows)),
        start_bytes=sum(int(r["projection"].get("held_at_start_bytes") or 0) for r in rows),
        measured_bytes=int(ev.get("total_bytes") or 0), measured_at=float(ev["measured_at_epoch_fraction"]),
        projected_bytes=int(ev["projected_total_bytes"]),
        low_bytes=int(ev.get("projected_low_total_bytes", ev["projected_total_bytes"])),
        high_bytes=int(ev.get("projected_high_total_bytes", ev["projected_total_bytes"])),
        ceiling=_rows_ceiling(rows, limit), limit=limit,
    )  # fmt: skip


def _part_measured(projection: Mapping[str, Any]) -> int:
    parts = [projection.get(k) for k in ("copies", "allocations")]
    return int(projection.get("held_at_start_bytes") or 0) + sum(int(p["measured_bytes"]) for p in parts if p)


def _workers_view(finding: FindingEntry) -> ProjectionView | None:
    """too-many-workers: its workers' growth since they started, summed from each worker's projection."""
    ev: Mapping[str, Any] = finding["evidence"]
    rows = [r for r in ev.get("workers") or [] if r.get("projection")]
    parts = [p for r in rows for p in (r["projection"].get("copies"), r["projection"].get("allocations")) if p]
    if not rows or not parts:
        return None
    return ProjectionView(
        code=finding["code"], loader_id=finding["loader_id"], workers=len(rows),
        start_bytes=sum(int(r["projection"].get("held_at_start_bytes") or 0) for r in rows),
        measured_bytes=sum(_part_measured(r["projection"]) for r in rows),
        measured_at=min(float(p["measured_at_epoch_fraction"]) for p in parts),
        projected_bytes=sum(int(r["projection"]["projected_bytes"]) for r in rows),
        low_bytes=sum(int(r["projection"]["projected_low_bytes"]) for r in rows),
        high_bytes=sum(int(r["projection"]["projected_high_bytes"]) for r in rows),
        ceiling=_rows_ceiling(rows, None), limit=None,
    )  # fmt: skip


def projection_views(findings: list[FindingEntry]) -> list[ProjectionView]:
    """A view per loader whose workers' memory was projected before its epoch ended: cow-growth's (the finding's own
    totals, so the chart and its text agree), else too-many-workers'. A projection made at the epoch's end is a
    measurement: nothing to draw."""
    views: dict[Any, ProjectionView] = {}
    for code, build in (("cow-growth", _cow_view), ("too-many-workers", _workers_view)):
        for finding in findings:
            key = (finding["loader_id"], finding["evidence"].get("rank"))
            if finding["code"] != code or key in views:
                continue
            view = build(finding)
            if view is not None and view.measured_at < 1.0:
                views[key] = view
    return list(views.values())


def projection_chart(view: ProjectionView) -> Chart:
    """The view as a chart on the epoch's share (0-100%), in MiB: the two readings (the workers' start and their last
    reading) with the band between them, the projection's range as a band from the last reading to the epoch's end,
    the projected value's line, the ceiling dashed, the limit where it is on the scale, a mark where it was measured."""
    who = f"{view.workers} workers'" if view.workers > 1 else "1 worker's"
    loader = f"loader {view.loader_id}" if view.loader_id is not None else "the loader"
    at = view.measured_at
    chart = Chart(
        f"Memory projection, {loader} ({view.code}): {who} growth, read to {100 * at:.0f}% of the epoch, "
        "projected to its end",
        "MiB grown since start", x_range=(0.0, 1.0), x_format="{:.0%}", x_label="share of the epoch done",
        y_format="{:,.0f}",
    )  # fmt: skip
    readings = as_read([(0.0, view.start_bytes / MiB), (at, view.measured_bytes / MiB)])
    chart.readings.append(Readings(f"read: {format_bytes(view.measured_bytes)} at {100 * at:.0f}% of the epoch "
                                   "(shaded: between the readings)", readings, MEASURED_COLOR))  # fmt: skip
    # Nothing is drawn past a limit the kernel enforces: a projection that reaches it says the workers are killed
    # before the epoch's end, not that they hold more.
    hard = view.limit[0] / MiB if view.limit and view.limit[1] in HARD_LIMITS else None
    m = view.measured_bytes / MiB
    projected = min(view.projected_bytes / MiB, hard) if hard else view.projected_bytes / MiB
    low, high = (min(view.low_bytes / MiB, hard), min(view.high_bytes / MiB, hard)) if hard else (
        view.low_bytes / MiB, view.high_bytes / MiB)  # fmt: skip
    chart.bands.append(Band(f"projected at the epoch's end: {format_bytes(view.projected_bytes)} (range "
                            f"{format_bytes(view.low_bytes)}-{format_bytes(view.high_bytes)}: every curve the "
                            "readings allow)", [(at, m), (1.0, high), (1.0, low)], PROJECTION_COLOR))  # fmt: skip
    chart.lines.append(Line("projected (the least bent curve that fits)", [(at, m), (1.0, projected)],
                            PROJECTION_COLOR, "dashed"))  # fmt: skip
    if hard and view.high_bytes / MiB > hard:
        chart.notes.append(f"The projection reaches the {view.limit[1] if view.limit else ''} ({hard:,.0f} MiB) before "
                           f"the epoch's end ({view.high_bytes / MiB:,.0f} MiB at the top of its range): the kernel "
                           "kills a process before its cgroup passes it, so it is drawn at the limit.")  # fmt: skip
    chart.marks.append((at, f"measured to {100 * at:.0f}% of the epoch"))
    drawn = max(high, m, projected)
    if view.ceiling:
        chart.ceilings.append((view.ceiling[0] / MiB, f"{view.ceiling[1]}: {format_bytes(view.ceiling[0])}"))
        drawn = max(drawn, view.ceiling[0] / MiB)
    if view.limit and (not view.ceiling or view.ceiling[0] != view.limit[0]):  # the limit once, as the ceiling
        label = f"the {view.limit[1]}: {format_bytes(view.limit[0])}"
        if view.limit[0] / MiB <= LIMIT_ON_SCALE * drawn:
            chart.hlines.append((view.limit[0] / MiB, label))
        else:
            chart.notes.append(f"Not drawn, off the scale: {label}.")
    if view.ceiling is None:
        chart.notes.append("No ceiling: this run's readings do not say what bounds the workers' growth (no page kinds "
                           "or no memory limit read).")  # fmt: skip
    return chart
