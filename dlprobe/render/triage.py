"""The terminal view of a triage result: what the log said, what the machine says, causes ranked, how to rerun."""

from __future__ import annotations

from typing import Any, cast

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dlprobe.analysis.report.schema import FindingEntry
from dlprobe.render.terminal import finding_panel
from dlprobe.units import format_bytes

MAX_MESSAGE_ROWS = 12
MAX_MESSAGE_CHARS = 100


def _header(result: dict[str, Any]) -> Text:
    log = result["log"]
    text = Text()
    text.append("dlprobe triage", style="bold cyan")
    facts = [f"{log['lines']:,} lines", format_bytes(log["bytes"])]
    if log["compressed"]:
        facts.append("gzip")
    if log["nul_bytes"]:
        facts.append(f"{log['nul_bytes']} NUL {'byte' if log['nul_bytes'] == 1 else 'bytes'}")
    if log["binary"]:
        facts.append("mostly binary")
    text.append(f" {log['source']}  {', '.join(facts)}")
    return text


def _messages(result: dict[str, Any]) -> Table:
    matches = result["log"]["matches"]
    table = Table(title="Messages recognised in the log", title_justify="left")
    table.add_column("line", justify="right")
    table.add_column("id")
    table.add_column("message", overflow="fold")
    shown = matches[-MAX_MESSAGE_ROWS:]
    for m in shown:
        text = m["text"].strip()
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 3] + "..."
        table.add_row(f"{m['line']:,}", m["id"], text)
    if len(matches) > len(shown):
        table.caption = f"last {len(shown)} of {len(matches)} kept; all in the --json result"
    return table


def _machine(result: dict[str, Any]) -> Text:
    machine = result["machine"]
    kernel = machine["kernel"]
    text = Text("This machine: ", style="bold")
    if not machine["checked"]:
        text.append("not checked", style="dim")
        if kernel["readable"]:
            kills = len(kernel["kills"])
            text.append(f"; kernel log ({kernel['source']}): {kills} OOM {'kill' if kills == 1 else 'kills'}")
        return text
    parts = []
    if kernel["readable"]:
        kills = kernel["kills"]
        parts.append(f"kernel log ({kernel['source']}): {len(kills)} OOM {'kill' if len(kills) == 1 else 'kills'}")
    else:
        parts.append(f"kernel log not readable ({kernel['error']})")
    shm = machine.get("shm")
    if shm:
        parts.append(f"/dev/shm {format_bytes(shm['total'])} ({format_bytes(shm['used'])} used)")
    cgroup = machine.get("cgroup")
    if cgroup:
        limit = format_bytes(cgroup["limit"]) if cgroup.get("limit") else "no limit"
        kills = cgroup.get("oom_kill")
        parts.append(f"memory cgroup {limit}" + (f", {kills} OOM kills" if kills else ""))
    if machine.get("nofile"):
        soft, hard = machine["nofile"]
        parts.append(f"open files {soft} (hard {hard})")
    text.append("; ".join(parts))
    # Read where triage runs, not from the log: the job's machine, container or limits may differ.
    text.append(" (read here, not from the log: the job's own only if it ran on this machine)", style="dim")
    return text


def _ranked_panel(rank: int, finding: dict[str, Any]) -> RenderableType:
    # triage's findings have a report finding's fields; their evidence is triage's own, shown as key: value lines
    panel = finding_panel(cast(FindingEntry, finding))
    confidence = (finding.get("evidence") or {}).get("confidence")
    title = Text(f"#{rank} ", style="bold")
    if isinstance(panel.title, Text):
        title.append_text(panel.title)
    if confidence:
        title.append(f" ({confidence})", style="dim")
    panel.title = title
    return panel


def triage_summary(result: dict[str, Any]) -> Group:
    parts: list[RenderableType] = [_header(result)]
    if result["log"]["matches"]:
        parts.append(_messages(result))
    if result["log"].get("read_error"):
        parts.append(Text(f"warning: stopped reading early: {result['log']['read_error']}", style="yellow"))
    if result["failure_found"]:
        parts.append(_machine(result))
        parts.append(Text("Likely causes, most likely first:", style="bold"))
    else:
        parts.append(Text(result["no_failure_reason"], style="bold yellow"))
    parts.extend(_ranked_panel(i, f) for i, f in enumerate(result["findings"], start=1))
    reproduce = result.get("reproduce")
    if reproduce:
        parts.append(Text("Reproduce under the probe:", style="bold"))
        parts.append(Text(f"  {reproduce['command']}", style="cyan"))
        parts.append(Text(f"  ({reproduce['note']})", style="dim"))
    return Group(*parts)
