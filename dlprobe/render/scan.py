"""The scan's terminal summary: what was checked, loader by loader, then the bad samples grouped by reason."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from dlprobe.scan.result import LoaderScan, ScanResult, group_by_reason

SHOWN_PER_GROUP = 10
_markup = Text.from_markup
INDENT = " " * 19  # under the reason: 2 + kind (9) + 1 + count (5) + 2


def scan_summary(result: ScanResult) -> Group:
    """Print it with `soft_wrap=True`: index lines and paths must stay whole for copying."""
    lines: list[Text] = []
    _summary_lines(result, lines)
    return Group(*lines)


def _summary_lines(result: ScanResult, lines: list[Text]) -> None:
    several = len(result.scans) > 1
    for scan in result.scans:
        _loader_lines(scan, lines, several)
    if result.interrupted:
        lines.append(_markup("[yellow]interrupted[/]: this is what was found until then"))
    elif result.died:
        lines.append(
            Text.from_markup("[red]the scan process died before it finished[/]: this is what was found until then")
        )
    unchecked = result.unchecked_note()
    if unchecked:
        lines.append(_markup(f"[yellow]note:[/] {escape(unchecked)}"))
    if not result.bad_count:
        # With loaders left unchecked, "no bad samples" alone would read as "the data is clean".
        where = f" in the {result.current.scanned:,} samples checked (other loaders not checked)" if unchecked else ""
        lines.append(
            Text.from_markup("[bold green]no bad samples[/]" + where + (" so far" if not result.complete else ""))
        )
        return
    for scan in result.scans:
        _bad_lines(scan, lines, several)


def _loader_lines(scan: LoaderScan, lines: list[Text], several: bool) -> None:
    scanned = f"{scan.scanned:,}"
    if scan.selected is not None:
        scanned += f" of {scan.selected:,}"
    took = f" in {scan.duration_s:.1f} s" if scan.duration_s is not None else ""
    workers = f" ({scan.workers} {scan.start_method} worker{'s' if scan.workers != 1 else ''})"
    which = f"{scan.label()}: " if several or scan.role else ""
    lines.append(
        Text.from_markup(
            f"[bold]dlprobe scan[/]: {escape(which)}checked {scanned} samples of {escape(str(scan.dataset_type))}"
            f"{took}{workers}"
        )
    )
    if scan.note:
        lines.append(_markup(f"[yellow]note:[/] {escape(scan.note)}"))
    if scan.shapes is False and scan.shape_note:
        lines.append(_markup(f"[dim]{escape(scan.shape_note)}[/]"))


def _bad_lines(scan: LoaderScan, lines: list[Text], several: bool) -> None:
    bad = scan.bad
    if not bad:
        if several:
            lines.append(_markup(f"{escape(scan.label())}: [green]no bad samples[/]"))
        return
    unit = scan.unit
    which = f"{escape(scan.label())}: " if several else ""
    lines.append(
        Text.from_markup(
            f"{which}[bold red]{len(bad)} bad sample{'s' if len(bad) != 1 else ''}[/] ({unit}, kind, reason):"
        )
    )
    for kind, reason, entries in group_by_reason(bad):
        lines.append(_markup(f"  [bold]{kind:<9}[/] {len(entries):>5}  {escape(reason)}"))
        for entry in entries[:SHOWN_PER_GROUP]:
            where = f"  {escape(entry['path'])}" if entry.get("path") else ""
            lines.append(_markup(f"{INDENT}{unit} {entry[unit]}{where}"))
        if len(entries) > SHOWN_PER_GROUP:
            lines.append(
                Text.from_markup(f"{INDENT}... and {len(entries) - SHOWN_PER_GROUP} more (all of them are in --json)")
            )
