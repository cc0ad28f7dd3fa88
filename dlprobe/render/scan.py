"""The scan's terminal summary: what was checked, then the bad samples grouped by reason."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from dlprobe.scan.result import ScanResult, group_by_reason

SHOWN_PER_GROUP = 10
INDENT = " " * 19  # under the reason: 2 + kind (9) + 1 + count (5) + 2


def print_scan_summary(result: ScanResult, console: Console) -> None:
    scanned = f"{result.scanned:,}"
    if result.selected is not None:
        scanned += f" of {result.selected:,}"
    took = f" in {result.duration_s:.1f} s" if result.duration_s is not None else ""
    workers = f" ({result.workers} {result.start_method} worker{'s' if result.workers != 1 else ''})"
    console.print(
        f"[bold]dlprobe scan[/]: checked {scanned} samples of {escape(str(result.dataset_type))}{took}{workers}",
        soft_wrap=True,
    )
    if result.interrupted:
        console.print("[yellow]interrupted[/]: this is what was found until then")
    elif result.died:
        console.print("[red]the scan process died before it finished[/]: this is what was found until then")
    if result.note:
        console.print(f"[yellow]note:[/] {escape(result.note)}", soft_wrap=True)
    if result.shapes is False and result.shape_note:
        console.print(f"[dim]{escape(result.shape_note)}[/]", soft_wrap=True)
    bad = result.bad
    if not bad:
        console.print("[bold green]no bad samples[/]" + (" so far" if not result.complete else ""))
        return
    unit = result.unit
    console.print(f"[bold red]{len(bad)} bad sample{'s' if len(bad) != 1 else ''}[/] ({unit}, kind, reason):")
    for kind, reason, entries in group_by_reason(bad):
        console.print(f"  [bold]{kind:<9}[/] {len(entries):>5}  {escape(reason)}", soft_wrap=True)
        for entry in entries[:SHOWN_PER_GROUP]:
            where = f"  {escape(entry['path'])}" if entry.get("path") else ""
            console.print(f"{INDENT}{unit} {entry[unit]}{where}", soft_wrap=True)
        if len(entries) > SHOWN_PER_GROUP:
            console.print(f"{INDENT}... and {len(entries) - SHOWN_PER_GROUP} more (all of them are in --json)")
