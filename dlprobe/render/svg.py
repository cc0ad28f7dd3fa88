"""Inline SVG charts for report.html: readings as dots with the band between them, lines, axes, ticks, limits and
event markers, no JavaScript, no matplotlib."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape

from dlprobe.render.readings import AsRead

# Colour-blind-safe (Okabe-Ito), dark enough on white for lines and legend swatches.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B")
DASHES = {"solid": "", "dotted": "2 3", "dashed": "6 4", "dashdot": "8 3 2 3"}
MAX_FLAGS = 30
MARKER_COLORS = {"error": "#B00020", "warning": "#8A5A00", "info": "#555555"}
# Event flags: markers closer than MERGE_PX share one label; labels stagger into FLAG_ROWS rows before merging.
MERGE_PX = 2.0
FLAG_ROWS = 3
FLAG_ROW_PX = 11  # 10 px text plus a pixel: rows never touch
FLAG_CHAR_PX = 7.0
FLAG_PAD_PX = 1.5
FLAG_GAP_PX = 2.0


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]
    dash: str = "solid"
    width: float = 1.6


@dataclass
class Readings:
    """A sampled series drawn as read (render/readings.py): a dot per reading, the band between two readings."""

    label: str
    data: AsRead
    color: str = PALETTE[0]
    dash: str = "solid"  # the dot's shape: solid a round dot, any other a square one (RSS, file pages)


@dataclass
class Band:
    """A filled area (a projection's range): the polygon through `points`."""

    label: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]


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
    readings: list[Readings] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    ceilings: list[tuple[float, str]] = field(default_factory=list)  # (y, label): a bound a projection cannot pass
    marks: list[tuple[float, str]] = field(default_factory=list)  # (x, label): a labelled vertical line
    notes: list[str] = field(default_factory=list)  # said under the legend: what the chart changed and why
    x_format: str = "{:g}"


LIMIT_COLOR = "#B00020"  # a limit the kernel enforces, a capacity
CEILING_COLOR = "#333333"  # a bound a projection was held under
BAND_OPACITY = {"solid": 0.16}  # the band between two readings; fainter for the square-dot series (RSS)
DOT_WIDTH = {"solid": 3.2}  # a reading's dot, in px; square dots are smaller


def _readings_svg(r: Readings, px: Callable[[float], float], py: Callable[[float], float]) -> list[str]:
    """A series as read: one path for the band between each two readings (lower to higher), and one path of
    zero-length strokes with round or square caps, a dot per reading (compact: no element per point)."""
    stroke = escape(r.color, quote=True)
    label = escape(r.label)
    out = []
    if r.data.spans:
        out.append(f'<path d="{_band_path(r.data.spans, px, py)}" fill="{stroke}" '
                   f'fill-opacity="{BAND_OPACITY.get(r.dash, 0.1)}" stroke="none">'
                   f"<title>{label}: between two readings</title></path>")  # fmt: skip
    dots = "".join(dict.fromkeys(f"M{_num(px(x))} {_num(py(y))}h0" for x, y in r.data.points))  # one per pixel
    if dots:
        cap = "round" if r.dash == "solid" else "square"
        out.append(f'<path d="{dots}" fill="none" stroke="{stroke}" stroke-width="{DOT_WIDTH.get(r.dash, 2.4)}" '
                   f'stroke-linecap="{cap}"><title>{label}: as read</title></path>')  # fmt: skip
    return out


def _band_path(spans: list[tuple[float, float, float, float]], px: Callable[[float], float],
               py: Callable[[float], float]) -> str:  # fmt: skip
    """The spans' rectangles as one stepped outline: along their tops left to right, back along their bottoms. Two
    neighbouring spans share the reading between them, so their rectangles touch and the outline is their union.
    Whole pixels: the band is a shade, and a long run's page stays small."""
    path = [f"M{px(spans[0][0]):.0f} {py(spans[0][3]):.0f}"]
    edges = [(x1, hi) for _, x1, _, hi in spans] + [(x0, lo) for x0, _, lo, _ in reversed(spans)]
    level = f"{py(spans[0][3]):.0f}"
    run_x = None  # a horizontal stretch at one level is one command, however many spans it crosses
    for i, (x, y) in enumerate(edges):
        if i == len(spans):  # the right end: down to the bottoms, and back left
            path.append(f"H{run_x}")
            run_x, level = None, f"{py(y):.0f}"
            path.append(f"V{level}")
        here = f"{py(y):.0f}"
        if here != level:
            if run_x:
                path.append(f"H{run_x}")
            path.append(f"V{here}")
            level = here
        run_x = f"{px(x):.0f}"
    path.append(f"H{run_x}")
    return "".join(path) + "Z"


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
    xs += [x for r in chart.readings for x, _ in r.data.points] + [x for b in chart.bands for x, _ in b.points]
    xs += [x for x, _ in chart.marks]
    ys = [y for line in chart.lines for _, y in line.points] + [y for y, _ in chart.hlines]
    ys += [y for r in chart.readings for _, y in r.data.points] + [y for b in chart.bands for _, y in b.points]
    ys += [y for y, _ in chart.ceilings]
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
        parts.append(f'<text x="{_num(x)}" y="{top + plot_h + 16}" text-anchor="middle" class="tk">'
                     f"{escape(chart.x_format.format(tick))}</text>")  # fmt: skip
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle" class="tk">'
                 f"{escape(chart.x_label)}</text>")  # fmt: skip
    parts.append(f'<text transform="translate(12 {top + plot_h / 2}) rotate(-90)" text-anchor="middle" class="tk">'
                 f"{escape(chart.y_label)}</text>")  # fmt: skip
    for band in chart.bands:
        coords = " ".join(f"{_num(px(x))},{_num(py(y))}" for x, y in band.points)
        parts.append(f'<polygon points="{coords}" fill="{escape(band.color, quote=True)}" fill-opacity="0.25" '
                     f'stroke="none"><title>{escape(band.label)}</title></polygon>')  # fmt: skip
    for r in chart.readings:
        parts.extend(_readings_svg(r, px, py))
    for levels, color, cls in ((chart.hlines, LIMIT_COLOR, "tk lim"), (chart.ceilings, CEILING_COLOR, "tk ceil")):
        for y, label in levels:
            yy = _num(py(y))
            parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{yy}" y2="{yy}" stroke="{color}" '
                         f'stroke-dasharray="6 4"><title>{escape(label)}</title></line>')  # fmt: skip
            parts.append(f'<text x="{left + plot_w - 4}" y="{_num(py(y) - 4)}" text-anchor="end" class="{cls}">'
                         f"{escape(label)}</text>")  # fmt: skip
    for x, label in chart.marks:
        xx = _num(px(x))
        anchor = "end" if px(x) > left + plot_w / 2 else "start"
        shift = -4 if anchor == "end" else 4
        parts.append(f'<line x1="{xx}" x2="{xx}" y1="{top}" y2="{top + plot_h}" stroke="#333" stroke-width="1.2">'
                     f"<title>{escape(label)}</title></line>")  # fmt: skip
        parts.append(f'<text x="{_num(px(x) + shift)}" y="{top + plot_h - 6}" text-anchor="{anchor}" class="tk" '
                     f'paint-order="stroke" stroke="#fff" stroke-width="3">{escape(label)}</text>')  # fmt: skip
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
    flagged: list[tuple[float, int, Marker]] = []
    for i, marker in enumerate(chart.markers):
        mx = _num(px(marker.x))
        color = MARKER_COLORS.get(marker.severity, MARKER_COLORS["info"])
        quiet = crowded and marker.severity == "info"
        opacity = ' stroke-opacity="0.25"' if quiet else ""
        parts.append(f'<line x1="{mx}" x2="{mx}" y1="{top}" y2="{top + plot_h}" stroke="{color}" stroke-width="1" '
                     f'stroke-dasharray="3 3"{opacity}><title>{escape(marker.label)}</title></line>')  # fmt: skip
        if not quiet:
            flagged.append((px(marker.x), i + 1, marker))
    # Numbered flags: the numbers are those of the event table under the charts. Row 0 sits above the plot, the
    # others just inside it, on a white halo so a line under a number does not make it unreadable.
    for flag in layout_flags(flagged, 0.0, float(width)):
        y = top - 3 if flag.row == 0 else top + 10 + (flag.row - 1) * FLAG_ROW_PX
        color = MARKER_COLORS.get(flag.severity, MARKER_COLORS["info"])
        parts.append(f'<text x="{_num(flag.x)}" y="{y}" text-anchor="middle" class="mk" fill="{color}" '
                     f'paint-order="stroke" stroke="#fff" stroke-width="3">{escape(flag.text)}'
                     f"<title>{escape(chr(10).join(flag.labels))}</title></text>")  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)


@dataclass
class Flag:
    """One numbered label over one or more markers: "4", or "1–3" when their lines are too close to label apart."""

    x: float  # the centre of the label, in the chart's pixels
    row: int  # 0 above the plot, 1.. inside it
    numbers: list[int]
    labels: list[str]
    severity: str

    @property
    def text(self) -> str:
        nums = sorted(self.numbers)
        if len(nums) == 1:
            return str(nums[0])
        if nums == list(range(nums[0], nums[-1] + 1)):
            return f"{nums[0]}\u2013{nums[-1]}"  # an en dash: the events of the table from the first to the last
        return ",".join(str(n) for n in nums)

    @property
    def width(self) -> float:
        return flag_width(self.text)


def flag_width(text: str) -> float:
    """The width a flag's label takes, padded: a digit or dash of 10 px bold text measured 6.8 px in headless
    Chromium (DejaVu Sans Bold, a wide fallback for system-ui), a comma about half that; erring wide only spreads
    the flags a little more."""
    return sum(3.5 if c == "," else FLAG_CHAR_PX for c in text) + 2 * FLAG_PAD_PX


def _severest(markers: list[Marker]) -> str:
    order = ("error", "warning", "info")
    return min((m.severity for m in markers), key=lambda s: order.index(s) if s in order else len(order))


def layout_flags(flagged: list[tuple[float, int, Marker]], lo: float, hi: float) -> list[Flag]:
    """Place one label per group of markers so that no two labels overlap.

    flagged: (x in pixels, number, marker). Markers whose lines are closer than MERGE_PX (one line to the eye)
    share one label ("1–3"). The labels then go, left to right, into the first of FLAG_ROWS rows where they
    clear the last label of that row; a label that fits no row is merged with every label to its left that its
    merged label would touch, and the layout starts again: a dense burst of events reads as one range ("1–7"),
    not as digits scattered over the rows ("1 6 / 2 7 / 3–5"). Labels are kept inside lo..hi (the drawing's
    edges)."""
    if not flagged:
        return []
    ordered = sorted(flagged, key=lambda f: (f[0], f[1]))
    groups: list[list[tuple[float, int, Marker]]] = [[ordered[0]]]
    for item in ordered[1:]:
        if item[0] - groups[-1][-1][0] < MERGE_PX:
            groups[-1].append(item)
        else:
            groups.append([item])
    while True:
        flags = [_flag(g, lo, hi) for g in groups]
        ends: list[float] = []  # the right edge of the last label of each row
        failed = None
        for index, flag in enumerate(flags):
            left, right = _box(flag)
            row = next((r for r, end in enumerate(ends) if left >= end + FLAG_GAP_PX), None)
            if row is None and len(ends) < FLAG_ROWS:
                row = len(ends)
                ends.append(float("-inf"))
            if row is None:
                failed = index
                break
            flag.row = row
            ends[row] = right
        if failed is None:
            return flags
        # The label just left of the one that failed is always among those it touches (it ended the row it sits
        # in, and every row was too close), so each round merges at least two groups and the loop ends.
        merged, start = groups[failed], failed
        while start > 0 and _box(flags[start - 1])[1] + FLAG_GAP_PX > _box(_flag(merged, lo, hi))[0]:
            start -= 1
            merged = groups[start] + merged
        groups[start : failed + 1] = [merged]


def _box(flag: Flag) -> tuple[float, float]:
    return flag.x - flag.width / 2, flag.x + flag.width / 2


def _flag(group: list[tuple[float, int, Marker]], lo: float, hi: float) -> Flag:
    flag = Flag(
        x=(group[0][0] + group[-1][0]) / 2,
        row=0,
        numbers=[n for _, n, _ in group],
        labels=[m.label for _, _, m in sorted(group, key=lambda f: f[1])],
        severity=_severest([m for _, _, m in group]),
    )
    half = flag.width / 2
    flag.x = min(max(flag.x, lo + half), hi - half)
    return flag


def legend_html(chart: Chart) -> str:
    """The legend as HTML under the chart (so the browser's find and screen readers see it)."""
    items = []
    for r in chart.readings:
        fill = escape(r.color, quote=True)
        cap = "round" if r.dash == "solid" else "square"
        swatch = (f'<svg width="28" height="10" aria-hidden="true"><rect x="2" y="1" width="24" height="8" '
                  f'fill="{fill}" fill-opacity="{BAND_OPACITY.get(r.dash, 0.1)}"/><path d="M8 5h0M20 5h0" '
                  f'stroke="{fill}" stroke-width="{DOT_WIDTH.get(r.dash, 2.4)}" '
                  f'stroke-linecap="{cap}"/></svg>')  # fmt: skip
        items.append(f"<li>{swatch} {escape(r.label)}</li>")
    for band in chart.bands:
        swatch = (f'<svg width="28" height="10" aria-hidden="true"><rect x="0" y="1" width="28" height="8" '
                  f'fill="{escape(band.color, quote=True)}" fill-opacity="0.25"/></svg>')  # fmt: skip
        items.append(f"<li>{swatch} {escape(band.label)}</li>")
    for line in chart.lines:
        dash = DASHES.get(line.dash, "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        swatch = (f'<svg width="28" height="10" aria-hidden="true"><line x1="0" x2="28" y1="5" y2="5" '
                  f'stroke="{escape(line.color, quote=True)}" stroke-width="2"{dash_attr}/></svg>')  # fmt: skip
        items.append(f"<li>{swatch} {escape(line.label)}</li>")
    for _, label in chart.ceilings:
        swatch = (f'<svg width="28" height="10" aria-hidden="true"><line x1="0" x2="28" y1="5" y2="5" '
                  f'stroke="{CEILING_COLOR}" stroke-width="2" stroke-dasharray="6 4"/></svg>')  # fmt: skip
        items.append(f"<li>{swatch} {escape(label)}</li>")
    legend = f'<ul class="legend">{"".join(items)}</ul>' if items else ""
    return legend + "".join(f'<p class="note chart-note">{escape(note)}</p>' for note in chart.notes)
