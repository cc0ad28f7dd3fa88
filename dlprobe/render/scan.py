"""The scan's terminal summary: what was checked, loader by loader, then the bad samples grouped by reason."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from dlprobe.scan.result import LoaderScan, ScanResult, group_by_reason

SHOWN_PER_GROUP = 10
INDENT = " " * 19  # under the reason: 2 + kind (9) + 1 + count (5) + 2


def print_scan_summary(result: ScanResult, console: Console) -> None:
    several = len(result.scans) > 1
    for scan in result.scans:
        _print_loader(scan, console, several)
    if result.interrupted:
        console.print("[yellow]interrupted[/]: this is what was found until then")
    elif result.died:
        console.print("[red]the scan process died before it finished[/]: this is what was found until then")
    unchecked = result.unchecked_note()
    if unchecked:
        console.print(f"[yellow]note:[/] {escape(unchecked)}", soft_wrap=True)
    if not result.bad_count:
        # With loaders left unchecked, "no bad samples" alone would read as "the data is clean".
        where = f" in the {result.current.scanned:,} samples checked (other loaders not checked)" if unchecked else ""
        console.print("[bold green]no bad samples[/]" + where + (" so far" if not result.complete else ""))
        return
    for scan in result.scans:
        _print_bad(scan, console, several)


def _print_loader(scan: LoaderScan, console: Console, several: bool) -> None:
    scanned = f"{scan.scanned:,}"
    if scan.selected is not None:
        scanned += f" of {scan.selected:,}"
    took = f" in {scan.duration_s:.1f} s" if scan.duration_s is not None else ""
    workers = f" ({scan.workers} {scan.start_method} worker{'s' if scan.workers != 1 else ''})"
    which = f"{scan.label()}: " if several or scan.role else ""
    console.print(
        f"[bold]dlprobe scan[/]: {escape(which)}checked {scanned} samples of {escape(str(scan.dataset_type))}"
        f"{took}{workers}",
        soft_wrap=True,
    )
    if scan.note:
        console.print(f"[yellow]note:[/] {escape(scan.note)}", soft_wrap=True)
    if scan.shapes is False and scan.shape_note:
        console.print(f"[dim]{escape(scan.shape_note)}[/]", soft_wrap=True)


def _print_bad(scan: LoaderScan, console: Console, several: bool) -> None:
    bad = scan.bad
    if not bad:
        if several:
            console.print(f"{escape(scan.label())}: [green]no bad samples[/]", soft_wrap=True)
        return
    unit = scan.unit
    which = f"{escape(scan.label())}: " if several else ""
    console.print(f"{which}[bold red]{len(bad)} bad sample{'s' if len(bad) != 1 else ''}[/] ({unit}, kind, reason):")
    for kind, reason, entries in group_by_reason(bad):
        console.print(f"  [bold]{kind:<9}[/] {len(entries):>5}  {escape(reason)}", soft_wrap=True)
        for entry in entries[:SHOWN_PER_GROUP]:
            where = f"  {escape(entry['path'])}" if entry.get("path") else ""
            console.print(f"{INDENT}{unit} {entry[unit]}{where}", soft_wrap=True)
        if len(entries) > SHOWN_PER_GROUP:
            console.print(f"{INDENT}... and {len(entries) - SHOWN_PER_GROUP} more (all of them are in --json)")
