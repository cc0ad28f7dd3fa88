"""The terminal summary of a report, as rich renderables (tested as exact text at a fixed width)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dlprobe.units import format_bytes

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}
MAX_EVIDENCE_ITEMS = 6
MAX_NUMBERS = 16


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def header(report: dict[str, Any]) -> Text:
    text = Text()
    text.append("dlprobe", style="bold cyan")
    argv = " ".join([report.get("script") or "?", *report.get("argv", [])])
    text.append(f" {argv}")
    code = report.get("exit_code")
    status = "still running?" if code is None else f"exit code {code}"
    if report.get("signal"):
        status += f" ({report['signal']})"
    duration = report.get("duration_s")
    text.append(f"  {status}" + (f", {duration:.1f}s" if duration is not None else ""))
    return text


def loaders_table(report: dict[str, Any]) -> Table:
    table = Table(title="DataLoaders", title_justify="left")
    for col in ("loader", "dataset", "len", "batch", "workers", "start", "options", "batches", "wait", "1st batch"):
        table.add_column(col, justify="left" if col in ("dataset", "start", "options") else "right")
    for lo in report["loaders"]:
        dataset = (lo.get("dataset_type") or "?").rsplit(".", 1)[-1]
        first = lo.get("first_batch_s")
        options = [f"prefetch={lo.get('prefetch_factor')}"] if lo.get("num_workers") else []
        options += [name for name in ("pin_memory", "persistent_workers") if lo.get(name)]
        table.add_row(
            str(lo["loader_id"]),
            dataset,
            "-" if lo.get("dataset_len") is None else f"{lo['dataset_len']:,}",
            str(lo.get("batch_size")),
            str(lo.get("num_workers")),
            lo.get("start_method") or "-",
            " ".join(options) or "-",
            f"{lo.get('batches', 0):,}",
            _pct(lo.get("wait_fraction")),
            "-" if first is None else f"{first:.2f}s",
        )
    return table


def process_name(proc: dict[str, Any]) -> str:
    if proc["role"] == "worker":
        return f"loader {proc['loader_id']} worker {proc['worker_id']}"
    if proc["role"] == "main":
        return "main"
    return f"other: {proc.get('comm') or '?'}"


def processes_table(report: dict[str, Any]) -> Table:
    table = Table(title="Memory per process (USS: private to it; PSS: its fair share; RSS counts shared pages)",
                  title_justify="left")  # fmt: skip
    for col in ("process", "pid", "RSS peak", "USS start", "USS peak", "USS end", "PSS peak"):
        table.add_column(col, justify="left" if col == "process" else "right", no_wrap=True)
    for proc in report["processes"]:
        uss = proc["uss"]
        table.add_row(
            process_name(proc),
            str(proc["pid"]),
            format_bytes(proc["rss"]["peak"]),
            format_bytes(uss["start"]),
            format_bytes(uss["peak"]),
            format_bytes(uss["end"]),
            format_bytes(proc["pss"]["peak"]),
        )
    return table


def _evidence_lines(evidence: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in evidence.items():
        if isinstance(value, list) and value and all(_is_number(i) for i in value):
            shown = ", ".join("?" if i is None else str(i) for i in value[:MAX_NUMBERS])
            more = f", ... ({len(value)} in all)" if len(value) > MAX_NUMBERS else ""
            lines.append(f"{key}: [{shown}{more}]")  # e.g. a batch's indices: one line, not one per index
        elif isinstance(value, list):
            for item in value[:MAX_EVIDENCE_ITEMS]:
                lines.append(f"{key}: {_compact(item, key)}")
            if len(value) > MAX_EVIDENCE_ITEMS:
                lines.append(f"{key}: ... {len(value) - MAX_EVIDENCE_ITEMS} more in report.json")
        elif value is not None:
            lines.append(f"{key}: {_compact(value, key)}")
    return lines


def _worker_growth_line(row: dict[str, Any]) -> str:
    line = (
        f"worker {row['worker_id']} (pid {row['pid']}): USS {format_bytes(row.get('uss_start_bytes'))} -> "
        f"{format_bytes(row.get('uss_peak_bytes'))} (+{format_bytes(row['uss_growth_bytes'])}), "
        f"PSS +{format_bytes(row.get('pss_growth_bytes'))}, RSS +{format_bytes(row.get('rss_growth_bytes'))}"
    )
    if "cow_bytes" in row:  # runs that recorded memory by kind of page
        line += (
            f"; copied +{format_bytes(row['cow_bytes'])}, new anonymous +{format_bytes(row['anon_growth_bytes'])}, "
            f"file +{format_bytes(row['pss_file_growth_bytes'])}, shm +{format_bytes(row['pss_shmem_growth_bytes'])}"
        )
    return line


def _compact(value: Any, key: str = "") -> str:
    if isinstance(value, dict) and "uss_growth_bytes" in value and "worker_id" in value:
        return _worker_growth_line(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(v, k)}" for k, v in value.items() if v is not None)
    if isinstance(value, int) and not isinstance(value, bool) and key.endswith("bytes"):
        return format_bytes(value)
    if isinstance(value, int) and not isinstance(value, bool) and key in ("items", "objects", "blocks", "frozen"):
        return f"{value:,}"
    return str(value)


def finding_panel(finding: dict[str, Any]) -> Panel:
    style = SEVERITY_STYLE.get(finding["severity"], "bold")
    body = Text()
    body.append(finding["title"] + "\n", style="bold")
    body.append(finding["detail"] + "\n")
    for line in _evidence_lines(finding.get("evidence") or {}):
        body.append(f"  {line}\n", style="dim")
    body.append("fix: ", style="bold green")
    body.append(finding["fix"])
    title = Text(f"{finding['severity'].upper()} {finding['code']}", style=style)
    return Panel(body, title=title, title_align="left", border_style=style.split()[-1])


def run_summary(report: dict[str, Any], run_dir: str | None = None) -> Group:
    parts: list[RenderableType] = [header(report)]
    if report["loaders"]:
        parts.append(loaders_table(report))
    if report["processes"]:
        parts.append(processes_table(report))
    findings = report["findings"]
    if findings:
        parts.extend(finding_panel(f) for f in findings)
    else:
        parts.append(Text("No problems found.", style="bold green"))
    if run_dir:
        parts.append(
            Text(f"Run saved in {run_dir} (report.html, report.json, memory.png, raw samples and events)", style="dim")
        )
    return Group(*parts)
