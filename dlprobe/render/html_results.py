"""The self-contained pages of `tune`, `scan` and `triage` results, in report.html's style and with its guarantees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from dlprobe import __version__
from dlprobe.analysis.report.schema import FindingEntry
from dlprobe.redact import redact_argv
from dlprobe.render.html import findings_section
from dlprobe.render.html_page import esc, page, scroll_box, value_html
from dlprobe.render.svg import PALETTE, Chart, Line, chart_svg, legend_html
from dlprobe.tune.records import TuneResult

MAX_BAD_ROWS = 500  # bad samples listed on a scan's page; the --json file has every one


def _title(kind: str, result: Mapping[str, Any]) -> str:
    # tune.json and scan.json are written redacted; one written before that still never shows a credential
    words = redact_argv([str(result.get("script") or "?"), *(str(a) for a in result.get("argv") or [])])
    return f"dlprobe {kind}: " + " ".join(words)


def _verdict(headline: str, ok: bool | None, rows: list[tuple[str, Any]]) -> str:
    cls = "ok" if ok else "warning" if ok is None else "error"
    table = "".join(f"<tr><th scope=row>{esc(k)}</th><td>{value_html(k, v)}</td></tr>" for k, v in rows)
    return (f'<section id="verdict" class="verdict {cls}"><h2>Verdict</h2><p class="status">{esc(headline)}</p>'
            f'{scroll_box(f"<table class=kv>{table}</table>")}</section>')  # fmt: skip


def _section(section_id: str, heading: str, value: Any) -> str:
    if not value:
        return ""
    inner = value_html(section_id, value)
    return f'<section id="{esc(section_id)}"><h2>{esc(heading)}</h2>{scroll_box(inner)}</section>'


def _guarded(parts: list[tuple[str, Any]], notes: list[str]) -> list[str]:
    """Each section built on its own: one that fails is named in the page instead of losing the page."""
    out = []
    for name, build in parts:
        try:
            out.append(build())
        except Exception as exc:  # a damaged result must still give a page that says what it could not show
            notes.append(f"{name}: {type(exc).__name__}: {exc}")
    return out


def _tune_chart(result: TuneResult) -> str:
    chart = Chart("Throughput by num_workers (one line per prefetch_factor and pin_memory)", "samples/s",
                  x_label="num_workers")  # fmt: skip
    lines: dict[str, list[tuple[float, float]]] = {}
    for t in result.get("trials") or []:
        rate = t.get("samples_per_s")
        if t.get("status") == "ok" and isinstance(rate, (int, float)) and isinstance(t.get("num_workers"), int):
            key = f"prefetch_factor={t.get('prefetch_factor')}" + (", pin_memory" if t.get("pin_memory") else "")
            lines.setdefault(key, []).append((float(t["num_workers"]), float(rate)))
    for i, (label, points) in enumerate(sorted(lines.items())):
        chart.lines.append(Line(label, sorted(points), PALETTE[i % len(PALETTE)]))
    if not chart.lines:
        return ""
    return f'<section id="chart"><h2>Trials</h2><figure>{chart_svg(chart)}{legend_html(chart)}</figure></section>'


def render_tune_html(result: TuneResult) -> str:
    notes: list[str] = []
    chosen = result.get("recommended")
    if chosen:
        settings = ", ".join(f"{k}={chosen.get(k)}" for k in ("num_workers", "prefetch_factor", "pin_memory"))
        headline = f"recommended: {settings}"
    else:
        headline = f"no recommendation: {result.get('reason') or 'every trial failed'}"
    rows = [("reason", result.get("reason")), ("elapsed", f"{result.get('elapsed_s')} s of {result.get('budget_s')} s"),
            ("batches per trial", result.get("batches_per_trial")), ("directory", result.get("dir"))]  # fmt: skip
    body = _guarded(
        [
            ("the verdict", lambda: _verdict(headline, bool(chosen), rows)),
            ("the chart", lambda: _tune_chart(result)),
            ("the trials", lambda: _section("trials", "Every trial", result.get("trials"))),
            ("the notes", lambda: _section("notes", "Notes", result.get("notes"))),
            ("the loader", lambda: _section("loader", "The loader as built", result.get("loader_config"))),
            ("the machine", lambda: _section("machine", "Cores and memory", {"cpu": result.get("cpu"),
                                                                              "memory": result.get("memory")})),
            ("the attempts", lambda: _section("attempts", "Runs of the script", result.get("attempts"))),
        ],
        notes,
    )  # fmt: skip
    footer = f"from {esc(result.get('dir') or '?')}. Every number here is also in tune.json."
    return page(_title("tune", result), body, notes, str(result.get("dlprobe_version") or __version__), footer)


def render_scan_html(result: dict[str, Any], exit_code: int) -> str:
    notes: list[str] = []
    bad = result.get("bad") or []
    scanned = result.get("scanned") or 0
    unit = "samples" if result.get("unit") in (None, "index") else f"samples (by {result.get('unit')})"
    headline = f"{len(bad)} bad {unit} of {scanned:,} checked" if isinstance(scanned, int) else f"{len(bad)} bad"
    if not result.get("complete"):
        headline += " (the scan did not finish)"
    rows = [("exit code", exit_code), ("loaders checked", result.get("loaders_checked")),
            ("selection", result.get("selection")), ("note", result.get("unchecked_note"))]  # fmt: skip
    shown = bad[:MAX_BAD_ROWS]
    if len(bad) > MAX_BAD_ROWS:
        notes.append(f"{len(bad) - MAX_BAD_ROWS} more bad {unit}: every one is in the --json file")
    body = _guarded(
        [
            ("the verdict", lambda: _verdict(headline, exit_code == 0, rows)),
            ("the bad samples", lambda: _section("bad", f"Bad {unit}", shown)),
            (
                "the loaders",
                lambda: _section(
                    "loaders",
                    "Loaders",
                    [{k: v for k, v in lo.items() if k != "bad"} for lo in result.get("loaders") or []],
                ),
            ),
            ("the skipped loaders", lambda: _section("skipped", "Loaders not scanned", result.get("skipped_loaders"))),
        ],
        notes,
    )
    footer = "Every number here is also in the --json file."
    return page(_title("scan", result), body, notes, str(result.get("dlprobe_version") or __version__), footer)


def render_triage_html(result: dict[str, Any]) -> str:
    notes: list[str] = []
    log = result.get("log") or {}
    found = bool(result.get("failure_found"))
    headline = "a DataLoader failure was found in the log" if found else (
        f"no DataLoader failure in the log: {result.get('no_failure_reason') or ''}")  # fmt: skip
    rows = [("log", log.get("path") if isinstance(log, dict) else None), ("reproduce", result.get("reproduce"))]
    body = _guarded(
        [
            ("the verdict", lambda: _verdict(headline, None if found else True, rows)),
            # triage's findings have a report finding's fields (their evidence is triage's own, shown key by key)
            ("the findings", lambda: findings_section(cast(list[FindingEntry], result.get("findings") or []))),
            ("the machine", lambda: _section("machine", "This machine", result.get("machine"))),
            ("the log", lambda: _section("log", "What the log shows", log)),
        ],
        notes,
    )
    title = f"dlprobe triage: {log.get('path') if isinstance(log, dict) else '?'}"
    version = str(result.get("dlprobe_version") or __version__)
    return page(title, body, notes, version, "Every number here is also in the --json file.")
