"""Inline SVG line charts for report.html: polylines, axes, ticks and event markers, no JavaScript, no matplotlib."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from html import escape

# Colour-blind-safe (Okabe-Ito), dark enough on white for lines and legend swatches.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B")
DASHES = {"solid": "", "dotted": "2 3", "dashed": "6 4", "dashdot": "8 3 2 3"}
MAX_FLAGS = 30
MARKER_COLORS = {"error": "#B00020", "warning": "#8A5A00", "info": "#555555"}


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]
    dash: str = "solid"
    width: float = 1.6


@dataclass
class Marker:
    """A vertical line at x with a short label (an epoch start, a worker's death, a hang)."""

    x: float
    label: str
    severity: str = "info"


@dataclass
class Chart:
    title: str
    y_label: str
    lines: list[Line] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    hlines: list[tuple[float, str]] = field(default_factory=list)  # (y, label): a limit or a capacity
    x_range: tuple[float, float] | None = None  # shared by every chart of a page so events line up
    y_format: str = "{:,.0f}"
    x_label: str = "seconds since the run started"


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


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 x 10^n steps) covering lo..hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks: list[float] = []
    value = first
    while value <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _num(v: float) -> str:
    return f"{v:.1f}"


def chart_svg(chart: Chart, width: int = 900, height: int = 260) -> str:
    """One chart as an <svg> element; every label is escaped (labels carry user data: script and dataset names)."""
    left, right, top, bottom = 70, 16, 28, 38
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for line in chart.lines for x, _ in line.points] + [m.x for m in chart.markers]
    ys = [y for line in chart.lines for _, y in line.points] + [y for y, _ in chart.hlines]
    x0, x1 = chart.x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    if x1 <= x0:
        x1 = x0 + 1.0
    y0, y1 = 0.0, (max(ys) if ys else 1.0)
    if y1 <= y0:
        y1 = y0 + 1.0
    y1 *= 1.05

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0) * plot_h

    title = escape(chart.title)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{title}" '
        f'preserveAspectRatio="xMinYMin meet">',
        f"<title>{title}</title>",
        f'<text x="{left}" y="16" class="ct">{title}</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for tick in nice_ticks(y0, y1):
        y = py(tick)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{_num(y)}" y2="{_num(y)}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{left - 4}" y="{_num(y + 4)}" text-anchor="end" class="tk">'
                     f"{escape(chart.y_format.format(tick))}</text>")  # fmt: skip
    for tick in nice_ticks(x0, x1, 8):
        x = px(tick)
        parts.append(f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{top + plot_h}" y2="{top + plot_h + 4}" stroke="#666"/>')
        parts.append(f'<text x="{_num(x)}" y="{top + plot_h + 16}" text-anchor="middle" class="tk">{tick:g}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle" class="tk">'
                 f"{escape(chart.x_label)}</text>")  # fmt: skip
    parts.append(f'<text transform="translate(12 {top + plot_h / 2}) rotate(-90)" text-anchor="middle" class="tk">'
                 f"{escape(chart.y_label)}</text>")  # fmt: skip
    for y, label in chart.hlines:
        yy = _num(py(y))
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{yy}" y2="{yy}" stroke="#B00020" '
                     f'stroke-dasharray="6 4"><title>{escape(label)}</title></line>')  # fmt: skip
        parts.append(f'<text x="{left + plot_w - 4}" y="{_num(py(y) - 4)}" text-anchor="end" class="tk lim">'
                     f"{escape(label)}</text>")  # fmt: skip
    for line in chart.lines:
        if not line.points:
            continue
        coords = " ".join(f"{_num(px(x))},{_num(py(y))}" for x, y in line.points)
        dash = DASHES.get(line.dash, "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        stroke = escape(line.color, quote=True)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{stroke}" stroke-width="{line.width}"'
                     f"{dash_attr}><title>{escape(line.label)}</title></polyline>")  # fmt: skip
    # Past MAX_FLAGS markers (a long run's epochs), only errors and warnings keep their numbered flag and
    # routine events are drawn faint: the flags would overlap into a black bar. The table lists every one.
    crowded = len(chart.markers) > MAX_FLAGS
    for i, marker in enumerate(chart.markers):
        mx = _num(px(marker.x))
        color = MARKER_COLORS.get(marker.severity, MARKER_COLORS["info"])
        label = escape(marker.label)
        quiet = crowded and marker.severity == "info"
        opacity = ' stroke-opacity="0.25"' if quiet else ""
        parts.append(f'<line x1="{mx}" x2="{mx}" y1="{top}" y2="{top + plot_h}" stroke="{color}" stroke-width="1" '
                     f'stroke-dasharray="3 3"{opacity}><title>{label}</title></line>')  # fmt: skip
        if not quiet:  # numbered flags: the numbers are those of the event table under the charts
            parts.append(f'<text x="{mx}" y="{top - 3 if i % 2 == 0 else top + 10}" text-anchor="middle" '
                         f'class="mk" fill="{color}">{i + 1}<title>{label}</title></text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)


def legend_html(chart: Chart) -> str:
    """The legend as HTML under the chart (so the browser's find and screen readers see it)."""
    items = []
    for line in chart.lines:
        dash = DASHES.get(line.dash, "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        swatch = (f'<svg width="28" height="10" aria-hidden="true"><line x1="0" x2="28" y1="5" y2="5" '
                  f'stroke="{escape(line.color, quote=True)}" stroke-width="2"{dash_attr}/></svg>')  # fmt: skip
        items.append(f"<li>{swatch} {escape(line.label)}</li>")
    return f'<ul class="legend">{"".join(items)}</ul>' if items else ""
