"""`dlprobe triage`: explain a failure that already happened, from its log; print it, write --json and --html."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from dlprobe.commands.options import json_option

if TYPE_CHECKING:
    from rich.console import Console

FOUND, NOTHING_FOUND = 0, 1


def triage(
    logfile: str = typer.Argument(..., help="The failed run's stderr (or `-` for stdin); gzip ok."),
    json_path: str | None = json_option("Also write the result as JSON to this path."),
    kernel_log: str | None = typer.Option(
        None, "--kernel-log", help="Read OOM kills from this saved `dmesg`/kern.log instead of this machine's."
    ),
    no_machine: bool = typer.Option(False, "--no-machine", help="The run failed elsewhere: do not check this machine."),
    html_path: str | None = typer.Option(None, "--html", help="Also write the result as a self-contained HTML page."),
) -> None:
    """Explain a DataLoader failure that already happened, from its log: causes ranked, evidence, fix.

    Exit code 0 when causes were found, 1 when the log shows no DataLoader failure, 2 for usage errors.
    """
    from dlprobe.console import out_console

    result = triage_log_to(logfile, json_path, out_console(), not no_machine, kernel_log, html_path)
    raise typer.Exit(exit_code(result))


def exit_code(result: dict[str, Any]) -> int:
    return FOUND if result["failure_found"] else NOTHING_FOUND


def triage_log_to(path: str, json_path: str | None, console: Console | None, machine_check: bool = True,
                  kernel_log: str | None = None, html_path: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Triage, print the summary, write --json; a failing --json path is reported after the summary."""
    from dlprobe.rundir.files import write_json_option
    from dlprobe.triage.result import triage as triage_result

    result = triage_result(path, machine_check, kernel_log)
    if console is not None:
        from dlprobe.render.triage import triage_summary

        console.print(triage_summary(result))
    if json_path:
        write_json_option(json_path, result, "the summary above is complete; pick a writable path")
    if html_path:
        from pathlib import Path

        from dlprobe.errors import DlprobeError
        from dlprobe.render.html_page import write_page
        from dlprobe.render.html_results import render_triage_html

        try:
            write_page(Path(html_path), render_triage_html(result))
        except OSError as exc:
            raise DlprobeError(f"cannot write --html {html_path}: {exc.strerror or exc}",
                               hint="the summary above is complete; pick a writable path") from None  # fmt: skip
    return result
