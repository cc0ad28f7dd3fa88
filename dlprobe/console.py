"""The consoles every command writes to, and the one way dlprobe prints its own `error:`/`hint:` lines."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

LOG_WIDTH = 120  # logs and CI: wide enough that tables do not wrap


def _console(stderr: bool) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console.width = LOG_WIDTH
    return console


def err_console() -> Console:
    """dlprobe's own output next to a running script: stderr, so the script's stdout stays the script's."""
    return _console(stderr=True)


def out_console() -> Console:
    """The product of a command that runs no script (report, triage, scan's summary): stdout."""
    return _console(stderr=False)


def print_error(message: str, hint: str = "") -> None:
    console = err_console()
    # escape: messages quote user text such as "[tool.dlprobe]", which is not markup
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    if hint:
        console.print(f"[bold]hint:[/] {escape(hint)}", soft_wrap=True)
