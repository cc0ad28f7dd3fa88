"""The terminal summary of a report, as rich renderables (tested as exact text at a fixed width)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dlprobe.analysis.evidence.rows import WorkerRow
from dlprobe.analysis.evidence.schema import KEY_EVIDENCE
from dlprobe.analysis.report.build import cleanup_lines, probe_cost_line
from dlprobe.analysis.report.schema import FindingEntry, ProcessEntry, Report, Verdict
from dlprobe.console import escaped_text
from dlprobe.units import NOT_MEASURED, NOT_READ, format_bytes

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}
MAX_EVIDENCE_ITEMS = 6
MAX_NUMBERS = 16
MAX_KEY_NUMBERS = 4  # evidence entries on a finding's line of key numbers
MAX_KEY_VALUE = 60  # characters of one value there (a frame, a path)


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def header(report: Report) -> Text:
    text = Text()
    text.append("dlprobe", style="bold cyan")
    argv = " ".join([report["script"] or "?", *report["argv"]])
    text.append(f" {argv}")
    code = report["exit_code"]
    status = "still running?" if code is None else f"exit code {code}"
    attached = report["attached"]
    if attached:  # `dlprobe attach`: a window on a job that goes on
        status = f"attached to pid {attached['pid']} " + (
            "(the job ended while watched)" if attached["job_ended"] else "(the job goes on)"
        )
    if report["signal"]:
        status += f" ({report['signal']})"
    duration = report["duration_s"]
    text.append(f"  {status}" + (f", {duration:.1f}s" if duration is not None else ""))
    return text


def loaders_table(report: Report) -> Table:
    table = Table(title="DataLoaders", title_justify="left")
    for col in ("loader", "dataset", "len", "batch", "workers", "start", "options", "batches", "wait", "1st batch"):
        table.add_column(col, justify="left" if col in ("dataset", "start", "options") else "right")
    for lo in report["loaders"]:
        dataset = (lo["dataset_type"] or "?").rsplit(".", 1)[-1]
        first = lo["first_batch_s"]
        options = [f"prefetch={lo['prefetch_factor']}"] if lo["num_workers"] else []
        options += [name for name, on in (("pin_memory", lo["pin_memory"]), ("persistent_workers",
                    lo["persistent_workers"])) if on]  # fmt: skip
        table.add_row(
            str(lo["loader_id"]),
            dataset,
            "-" if lo["dataset_len"] is None else f"{lo['dataset_len']:,}",
            str(lo["batch_size"]),
            "?" if lo["num_workers"] is None else str(lo["num_workers"]),  # "?": settings not read
            lo["start_method"] or "-",
            " ".join(options) or "-",
            f"{lo['batches']:,}",
            _pct(lo["wait_fraction"]),
            "-" if first is None else f"{first:.2f}s",
        )
    return table


def ranks_table(report: Report) -> Table:
    """One row per rank of a job: its loaders, workers, waiting share and memory."""
    table = Table(title="Ranks", title_justify="left")
    several_hosts = len({r["host"] for r in report["ranks"]}) > 1
    for col in ("rank", *(("host",) if several_hosts else ()), "pid", "loaders", "workers", "batches", "wait",
                "USS peak", "workers USS", "PSS peak"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("rank", "host") else "right", no_wrap=True)
    for rank in report["ranks"]:
        table.add_row(
            rank["label"],
            *((rank["host"] or "?",) if several_hosts else ()),
            str(rank["pid"]),
            str(rank["loaders"]),
            str(rank["workers"]),
            f"{rank['batches']:,}",
            _pct(rank["wait_fraction"]),
            format_bytes(rank["uss_peak"]),
            format_bytes(rank["workers_uss_peak"]),
            format_bytes(rank["pss_peak"]),
        )
    return table


def node_lines(report: Report) -> Text:
    """Each node's total memory (every process of the tree: what the OOM killer sees) against its limit."""
    text = Text()
    nodes = report["job"]["nodes"]
    for node in nodes:
        name = (
            "Node"
            if len(nodes) == 1
            else f"Node {node['node_rank'] if node['node_rank'] is not None else node['node']}"
        )
        line = f"{name} total PSS peak {format_bytes(node['pss_peak'])}"
        if node["memory_limit"]:
            line += f" of {format_bytes(node['memory_limit'])} ({node['memory_limit_kind']})"
        line += f", {node['worker_processes']} worker processes"
        if (projected := node["pss_projected_epoch_end"]) is not None:
            line += f"; projected at the end of the epoch {format_bytes(projected)}"
        if (fit := node["workers_per_rank_fit"]) is not None:
            line += f"; workers per rank that fit: {fit}"
        text.append(line + "\n")
    text.rstrip()
    return text


def process_name(proc: ProcessEntry) -> str:
    if proc["role"] == "worker":
        return f"loader {proc['loader_id']} worker {proc['worker_id']}"
    if proc["role"] == "main":
        return "main"
    return f"other: {proc['comm'] or '?'}"


def processes_table(report: Report) -> Table:
    table = Table(title="Memory per process (USS: private to it; PSS: its fair share; RSS counts shared pages)",
                  title_justify="left")  # fmt: skip
    for col in ("process", "pid", "RSS peak", "USS start", "USS peak", "USS end", "PSS peak"):
        table.add_column(col, justify="left" if col == "process" else "right", no_wrap=True)
    for proc in report["processes"]:
        uss = proc["uss"]
        # smaps_rollup refused: USS and PSS are unknown, and say so ("not read", with the reason in probe-degraded)
        smaps = (lambda _v: NOT_READ) if proc.get("memory_unread") else format_bytes
        table.add_row(
            process_name(proc),
            str(proc["pid"]),
            format_bytes(proc["rss"]["peak"]),
            smaps(uss["start"]),
            smaps(uss["peak"]),
            smaps(uss["end"]),
            smaps(proc["pss"]["peak"]),
        )
    return table


def _evidence_lines(evidence: Mapping[str, Any]) -> list[str]:  # every key alike: read as key: value lines
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


def _gain(n: int | None) -> str:
    """'+61.1 MiB', or 'not measured': never '+-'."""
    return NOT_MEASURED if n is None else f"+{format_bytes(n)}"


def _worker_growth_line(row: WorkerRow) -> str:
    start, peak, grew = row.get("uss_start_bytes"), row.get("uss_peak_bytes"), row.get("uss_growth_bytes")
    if start is not None and peak is not None:
        uss = f"USS {format_bytes(start)} -> {format_bytes(peak)} ({_gain(grew)})"
    elif peak is not None:  # no reading from its first moments: its peak is still true
        uss = f"USS peak {format_bytes(peak)}" + (f" ({_gain(grew)})" if grew is not None else "")
    else:
        uss = f"USS {_gain(grew)}"
    line = f"worker {row['worker_id']} (pid {row['pid']}): {uss}"
    # A key the finding does not carry (too-many-workers reads USS only) was not asked for, not "not measured".
    if "pss_growth_bytes" in row:
        line += f", PSS {_gain(row.get('pss_growth_bytes'))}"
    if "rss_growth_bytes" in row:
        line += f", RSS {_gain(row.get('rss_growth_bytes'))}"
    if "cow_bytes" in row:  # runs that recorded memory by kind of page
        line += (
            f"; copied {_gain(row.get('cow_bytes'))}, new anonymous {_gain(row.get('anon_growth_bytes'))}, "
            f"file {_gain(row.get('pss_file_growth_bytes'))}, shm {_gain(row.get('pss_shmem_growth_bytes'))}"
        )
    return line


def _compact(value: Any, key: str = "") -> str:
    if key == "ranks" and isinstance(value, dict) and "title" in value:  # a merged finding: one line per rank
        return f"{value.get('rank')} (pid {value.get('pid')}): {value['title']}"
    if isinstance(value, dict) and "uss_growth_bytes" in value and "worker_id" in value:
        return _worker_growth_line(cast(WorkerRow, value))  # a worker's memory row: it has both keys
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(v, k)}" for k, v in value.items() if v is not None)
    if isinstance(value, int) and not isinstance(value, bool) and key.endswith("bytes"):
        return format_bytes(value)
    if isinstance(value, int) and not isinstance(value, bool) and key in ("items", "objects", "blocks", "frozen"):
        return f"{value:,}"
    return str(value)


# A number and its unit ("+99.3 MiB", "12 s") that must not be split over two lines of a box.
_NUMBER_AND_UNIT = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|ms|s|min|h)\b")
_HELD_SPACE = "\ue000"  # a printable stand-in (one cell, not whitespace) for a space rich must not break at


class KeepUnits:
    """Text that wraps between words but never between a number and its unit. rich breaks lines at any
    whitespace, the no-break space included, so those spaces are held as a printable stand-in while rich wraps
    and put back in each line it made."""

    def __init__(self, text: Text, indent: int = 0) -> None:
        self.text = text
        self.indent = indent  # every line, the wrapped ones too, starts this many spaces in

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        held = escaped_text(self.text).copy()  # escaped before it is wrapped, so every escape is shown
        held.plain = _NUMBER_AND_UNIT.sub(lambda m: f"{m[1]}{_HELD_SPACE}{m[2]}", held.plain)  # same length
        for line in held.wrap(console, max(20, options.max_width - self.indent)):
            line.plain = line.plain.replace(_HELD_SPACE, " ")
            if self.indent:
                line = Text(" " * self.indent) + line
            line.no_wrap = True  # it fits: wrapped once, here
            yield line


def finding_panel(finding: FindingEntry) -> Panel:
    """A finding in full (--verbose, and triage): title, detail, every evidence entry, fix."""
    style = SEVERITY_STYLE.get(finding["severity"], "bold")
    body = Text()
    body.append(finding["title"] + "\n", style="bold")
    body.append(finding["detail"] + "\n")
    for line in _evidence_lines(finding["evidence"]):
        body.append(f"  {line}\n", style="dim")
    for line in _cause_lines(finding):
        body.append(f"{line}\n", style="italic")
    body.append("fix: ", style="bold green")
    body.append(finding["fix"])
    title = Text(f"{finding['severity'].upper()} {finding['code']}", style=style)
    return Panel(KeepUnits(body), title=title, title_align="left", border_style=style.split()[-1])


def _cause_lines(finding: FindingEntry) -> list[str]:
    lines = []
    if finding.get("explained_by"):
        lines.append(f"explained by {finding['explained_by']} (above)")
    if finding.get("severity_reason"):
        lines.append(f"{finding['severity']}: {finding['severity_reason']}")
    return lines


def key_numbers(finding: FindingEntry) -> str:
    """One line of the evidence that says how bad it is: the code's KEY_EVIDENCE, else its first two scalar entries."""
    evidence: Mapping[str, Any] = finding["evidence"]
    keys = KEY_EVIDENCE.get(finding["code"])
    if keys is None:
        keys = tuple(k for k, v in evidence.items() if v is not None and not isinstance(v, (list, dict)))[:2]
    shown = []
    for key in keys[:MAX_KEY_NUMBERS]:
        value = evidence.get(key)
        if value is None or value == [] or value == {}:
            continue
        text = _compact(value, key) if not isinstance(value, list) else ", ".join(_compact(v, key) for v in value)
        shown.append(f"{key}: {text if len(text) <= MAX_KEY_VALUE else text[: MAX_KEY_VALUE - 3] + '...'}")
    return " \u00b7 ".join(shown)


def _indented(text: Text) -> KeepUnits:
    return KeepUnits(text, indent=2)


def _numbers_and_fix(finding: FindingEntry | None, fix: str | None) -> list[RenderableType]:
    parts: list[RenderableType] = []
    numbers = key_numbers(finding) if finding is not None else ""
    if numbers:
        parts.append(_indented(Text(numbers, style="dim")))
    if fix:
        line = Text("fix: ", style="bold green")
        line.append(fix)
        parts.append(_indented(line))
    return parts


def _verdict_block(verdict: Verdict, finding: FindingEntry | None) -> Group:
    """The report's first words: the cause, with its numbers and what it explains, and the change to make."""
    style = SEVERITY_STYLE.get(verdict["severity"], "bold")
    head = Text("Verdict: ", style="bold")
    head.append(f"{verdict['severity'].upper()} {verdict['code']}: ", style=style)
    head.append(verdict["sentence"], style="bold")
    return Group(KeepUnits(head), *_numbers_and_fix(finding, verdict["fix"]))


def finding_brief(finding: FindingEntry) -> Group:
    """A finding by default: its code and title, its key numbers, its fix; a finding another one explains gives no fix
    of its own (its cause's is the change to make)."""
    style = SEVERITY_STYLE.get(finding["severity"], "bold")
    head = Text(f"{finding['severity'].upper()} {finding['code']}", style=style)
    explained_by = finding.get("explained_by")
    if explained_by:
        head.append(f" (explained by {explained_by})", style="italic")
    head.append(": ")
    head.append(finding["title"])
    fix = None if explained_by else finding["fix"]
    if fix and finding["severity"] == "info":
        fix = _first_sentence(fix)  # a note's change in one sentence: the screen is the verdict's and the warnings'
    return Group(KeepUnits(head), *_numbers_and_fix(finding, fix))


_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]`'\"][.!?])\s+(?=[A-Z`(])")


def _first_sentence(text: str) -> str:
    """The first sentence of a fix, and where the rest is (a sentence ends at '. ' before a capital or a quote)."""
    first, *rest = _SENTENCE_END.split(text, maxsplit=1)
    return f"{first} (more: --verbose)" if rest else text


def findings_view(report: Report, verbose: bool = False) -> list[RenderableType]:
    """The verdict first, then every other finding: briefly by default, in full with --verbose."""
    findings = report["findings"]
    verdict = report.get("verdict")
    parts: list[RenderableType] = []
    rest = list(findings)
    if verdict:
        lead = next((f for f in findings if f["code"] == verdict["code"]), None)
        parts.append(_verdict_block(verdict, lead))
        if lead is not None and not verbose:
            rest.remove(lead)  # the verdict is its brief
    elif findings:
        parts.append(Text("No problem found; notes:", style="bold green"))
    if verbose:
        parts.extend(finding_panel(f) for f in rest)
    else:
        parts.extend(finding_brief(f) for f in rest)
    return parts


def run_summary(report: Report, run_dir: str | None = None, verbose: bool = False) -> Group:
    """The report in the terminal: by default a screen (the verdict, each finding's title, key numbers and fix);
    with `verbose` every finding's detail and evidence and the memory of every process too."""
    parts: list[RenderableType] = [header(report)]
    if len(report.get("ranks") or []) > 1:
        parts.append(ranks_table(report))
        parts.append(node_lines(report))
    elif report["loaders"] and not report["attached"]:  # attach knows no loader's settings: nothing to show
        parts.append(loaders_table(report))
    if verbose and report["processes"] and len(report.get("ranks") or []) <= 1:
        parts.append(processes_table(report))
    findings = report["findings"]
    if findings:
        parts.extend(findings_view(report, verbose))
    else:
        parts.append(Text("No problems found.", style="bold green"))
    # The probe's cost says something once there was a loader to probe: for a script that failed before its loader
    # (a syntax error) it would read "99% of one core", all of it dlprobe's own start-up. report.json keeps it.
    cost = probe_cost_line(report) if report["loaders"] or verbose else None
    for line in [*cleanup_lines(report), cost]:
        if line:
            parts.append(Text(line, style="dim"))
    if run_dir:
        parts.append(
            Text(f"Run saved in {run_dir} (report.html, report.json, memory.png, raw samples and events)", style="dim")
        )
    if not verbose and report["findings"]:
        parts.append(Text("Each finding's evidence: --verbose, report.html or report.json.", style="dim"))
    return Group(*parts)
