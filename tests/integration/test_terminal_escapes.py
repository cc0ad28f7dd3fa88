"""Text that came from a run reaches the terminal with its control characters escaped and its brackets as they are:
a run cannot set the window title, clear the screen or hide a link in what `dlprobe report` and `triage` print."""

from __future__ import annotations

import re
from pathlib import Path

from dlprobe.console import SafeConsole, escape_controls
from tests.conftest import run_dlprobe

# a window title (OSC 0), clear screen (CSI 2J), a hidden OSC 8 link, rich markup for a link, a C1 CSI, DEL
HOSTILE = (
    "title\x1b]0;pwned\x07 clear\x1b[2J link\x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\ "
    "[link=https://evil.example]m[/link] [bold]b[/bold] [/nope] c1\x9b31m del\x7f"
)
# What a terminal acts on: any C0 but newline and tab, DEL, C1. Rich's own styling is ESC [ ... m, and nothing else.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def _plain(out: str) -> str:
    """`out` without rich's own SGR colour sequences."""
    return re.sub(r"\x1b\[[0-9;]*m", "", out)


def _acted_on(out: str) -> list[str]:
    """The control characters left once rich's own colour sequences are taken out."""
    return RAW_CONTROL.findall(_plain(out))


def test_an_exception_message_is_shown_escaped_by_report(tmp_path: Path):
    (tmp_path / "train.py").write_text(f"raise RuntimeError({HOSTILE!r})\n")
    run = tmp_path / "run"
    assert run_dlprobe(["run", "-q", "--out", str(run), "train.py"], cwd=tmp_path).returncode == 1
    proc = run_dlprobe(["report", str(run)], cwd=tmp_path, env={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert proc.returncode == 0, proc.stderr
    assert _acted_on(proc.stdout) == []
    shown = " ".join(_plain(proc.stdout).split())  # the panel's lines joined
    assert "title\\x1b]0;pwned" in shown and "c1\\x9b31m del\\x7f" in shown
    assert "\x1b]8;" not in proc.stdout  # no hyperlink, from the text or from rich markup in it
    assert "[link=https://evil.example]m[/link] [bold]b[/bold] [/nope]" in shown  # brackets are no markup


def test_a_log_line_is_shown_escaped_by_triage(tmp_path: Path):
    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        f"RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. {HOSTILE}\n"
    )
    proc = run_dlprobe(["triage", "--no-machine", str(log)], cwd=tmp_path, env={"FORCE_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert _acted_on(proc.stdout) == []
    assert "title\\x1b]0;pwned" in _plain(proc.stdout) and "\x1b]8;" not in proc.stdout


def test_the_console_escapes_what_rich_would_pass_and_keeps_its_own_styles():
    import io

    from rich.table import Table
    from rich.text import Text

    out = io.StringIO()
    console = SafeConsole(file=out, force_terminal=True, width=200, color_system="standard")
    table = Table()
    table.add_column("cell")
    table.add_row(HOSTILE)
    console.print(table)
    console.print(Text("ok", style="bold red link https://example.org"))
    console.print("[yellow]warning:[/] own markup", markup=True)
    text = out.getvalue()
    assert _acted_on(text) == []
    assert "\x1b]8;" not in text and "warning:" in text and "[yellow]" not in text
    assert escape_controls("a\tb\nc\x1b\x9b\x7f") == "a\tb\nc\\x1b\\x9b\\x7f"
