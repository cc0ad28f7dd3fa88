"""The page primitives every dlprobe HTML page shares (report.html and the tune, scan and triage pages): escaping,
values as text and tables, `backticks` as code, wide tables in a scrolling box, the style, the CSP and the page
around the sections. Everything that comes from a run or a result is user data: it goes through `esc`."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path
from typing import Any

from dlprobe.atomic import write_text_atomic
from dlprobe.units import format_bytes

MAX_ROWS = 50  # rows of one evidence table; the rest stay in report.json
ID_KEYS = ("pid", "pids", "line", "epoch", "exit_code", "returncode")
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def _fmt(key: str, value: Any) -> str:
    """One evidence value as text, in human units where its name says what it is; a value the run lacks is said to
    be missing in words (a "-" reads as a minus sign or a hole in the text)."""
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and (key in ID_KEYS or key.endswith(("_id", "pid", "index", "indices", "line"))):
        return str(value)  # a pid or an index is a name, not an amount: no thousands separator
    if isinstance(value, (int, float)):
        if key.endswith("bytes") or key in ("rss", "uss", "pss", "swap", "limit", "total", "peak") or _is_memory(key):
            return format_bytes(value)
        if isinstance(value, float) and ("share" in key or "fraction" in key) and 0 <= value <= 1:
            return f"{100 * value:.1f}%"
        if isinstance(value, float):
            return f"{value:.4g}"
        return f"{value:,}"
    return str(value)


_MEMORY_WORDS = {"rss", "uss", "pss", "swap", "shm", "memory", "projected"}
_AMOUNT_WORDS = {"peak", "end", "start", "limit", "total"}


def _is_memory(key: str) -> bool:
    """A reading of memory by its name: "pss_peak", "memory_limit", "worker_projected_peak" (the job's tables); not
    "workers_that_fit_memory", a count."""
    words = key.split("_")
    return words[-1] in _AMOUNT_WORDS and not _MEMORY_WORDS.isdisjoint(words)


def value_html(key: str, value: Any, depth: int = 0) -> str:
    if isinstance(value, dict):
        if depth > 2:
            return esc(value)
        rows = "".join(f"<tr><th scope=row>{esc(k)}</th><td>{value_html(str(k), v, depth + 1)}</td></tr>"
                       for k, v in value.items())  # fmt: skip
        return f'<table class="kv">{rows}</table>'
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value) and depth <= 2:
            cols: list[str] = []
            for row in value[:MAX_ROWS]:
                cols += [str(k) for k in row if str(k) not in cols]
            head = "".join(f"<th scope=col>{esc(c)}</th>" for c in cols)
            body = "".join(
                "<tr>" + "".join(f"<td>{value_html(c, row.get(c), depth + 1)}</td>" for c in cols) + "</tr>"
                for row in value[:MAX_ROWS]
            )
            more = (
                f"<p class=note>{len(value) - MAX_ROWS} more rows in report.json</p>" if len(value) > MAX_ROWS else ""
            )
            return f'<table class="ev"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}'
        shown = ", ".join(esc(_fmt(key, v)) if not isinstance(v, (dict, list)) else value_html(key, v, depth + 1)
                          for v in value[:MAX_ROWS])  # fmt: skip
        more = f", ... ({len(value)} in all)" if len(value) > MAX_ROWS else ""
        return f"{shown}{more}" if value else "none"
    return esc(_fmt(key, value))


def scroll_box(inner: str) -> str:
    """A table in its own horizontally scrolling box: a wide table scrolls there instead of the whole page (tests
    check every table of every page sits in one)."""
    return f'<div class="scroll">{inner}</div>'


def _rich_text(text: str) -> str:
    """Text whose `backticks` are code: short spans inline, long or multi-line ones as copyable blocks."""
    parts = str(text).split("`")
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0 or i == len(parts) - 1:
            out.append(esc(part) if i % 2 == 0 else esc("`" + part))
        elif "\n" in part or len(part) > 70:
            out.append(f'<pre class="code">{esc(part)}</pre>')
        else:
            out.append(f"<code>{esc(part)}</code>")
    return "".join(out)


STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;background:#fff;margin:0 auto;
max-width:1100px;padding:1em 1.5em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:1.6em}
h3{font-size:1.05em;margin:0 0 .3em}code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
code{background:#f0f0f0;padding:0 .2em;border-radius:3px}pre{background:#f5f5f5;border:1px solid #ddd;padding:.5em;
overflow-x:auto;white-space:pre-wrap;word-break:break-word;margin:.3em 0}
.verdict{border-left:6px solid #555;padding:.2em 1em;background:#fafafa}.verdict.ok{border-color:#1b7f3b;
background:#f1f8f3}.verdict.error{border-color:#B00020;background:#fdf1f3}.verdict.warning{border-color:#8A5A00;
background:#fff8e6}.status{font-size:1.1em;font-weight:600}
.status.ok{color:#1b6b34}.status.error{color:#9b001c}.status.warning{color:#6b4600}
.card{border:1px solid #ccc;border-left:6px solid #555;border-radius:4px;padding:.6em 1em;margin:.8em 0;
break-inside:avoid}.card.error{border-left-color:#B00020}.card.warning{border-left-color:#8A5A00}
.card.info{border-left-color:#1f5fa8}.sev{font-size:.8em;padding:.1em .4em;border-radius:3px;color:#fff;background:#555}
.error .sev{background:#B00020}.warning .sev{background:#7a4f00}.info .sev{background:#1f5fa8}
.loader{font-weight:normal;color:#444}.title{font-weight:600}
.fix{background:#eef6ee;padding:.4em .6em;border-radius:3px}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #ddd;padding:.15em .45em;text-align:left;
vertical-align:top}th{background:#f3f3f3}table.kv th{font-weight:600}table.ev{font-size:.9em}
tr.fail td,tr.error td{background:#fdecee}tr.warning td{background:#fff6e0}
details{margin:.4em 0}summary{cursor:pointer;font-weight:600}figure{margin:.8em 0}
svg.chart{max-width:100%;height:auto;font-family:system-ui,sans-serif}
svg .ct{font-size:13px;font-weight:600;fill:#1a1a1a}
svg .tk{font-size:11px;fill:#333}svg .lim{fill:#9b001c}svg .ceil{fill:#333;font-weight:600}
svg .mk{font-size:10px;font-weight:700}
.legend{list-style:none;padding:0;margin:0;display:flex;flex-wrap:wrap;gap:.2em 1.2em;font-size:.85em}
.scroll{overflow-x:auto}
.note{color:#444;font-style:italic}.problems{border:1px solid #8A5A00;background:#fff8e6;padding:.4em 1em}
footer{margin-top:2em;color:#555;font-size:.85em}
@media print{body{max-width:none;font-size:11pt}details>summary{list-style:none}
details::details-content{content-visibility:visible;display:block}
.card,figure,table{break-inside:avoid}a{color:inherit}}
"""


def page(title: str, body: list[str], notes: list[str], version: str, footer: str) -> str:
    """The page around its sections: CSP, style, the list of what could not be shown, the footer (already HTML)."""
    body = [b for b in body if b]
    if notes:
        items = "".join(f"<li>{esc(n)}</li>" for n in notes)
        body.insert(
            1,
            '<section class="problems" id="not-shown"><h2>What this page could not show</h2>'
            f"<ul>{items}</ul></section>",
        )
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    head, _, rest = title.partition(": ")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{esc(head)}: <code>{esc(rest)}</code></h1></header><main>"
        + "\n".join(body)
        + f"</main><footer>dlprobe {esc(version)}, page written {stamp} UTC {footer}</footer></body></html>\n"
    )


def write_page(path: Path, text: str) -> None:
    """Write atomically, so a reader never sees half a page."""
    write_text_atomic(path, text, encoding="utf-8")
