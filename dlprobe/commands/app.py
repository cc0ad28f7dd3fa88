"""The typer app: one command per module of `dlprobe.commands`, registered in the order a user meets them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from dlprobe import __version__
from dlprobe.commands import attach, cache, check, compare, demo, report, run, scan, triage, tune
from dlprobe.commands.options import SCRIPT_COMMAND, DlprobeCommand, LaunchCommand, flowed

app = typer.Typer(
    name="dlprobe",
    help="Find out why a PyTorch DataLoader is slow, hangs, eats memory or gets killed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dlprobe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Find out why a PyTorch DataLoader is slow, hangs, eats memory or gets killed."""


def _command(function: Callable[..., Any], launch: bool = False) -> None:
    """Register a command; one that runs a target takes everything after it as the target's own."""
    settings: dict[str, Any] = {"cls": LaunchCommand, "context_settings": SCRIPT_COMMAND} if launch else {}
    app.command(help=flowed(function.__doc__), **{"cls": DlprobeCommand, **settings})(function)


# In the order a user meets them.
_command(run.run, launch=True)
_command(report.report)
_command(compare.compare)
_command(tune.tune, launch=True)
_command(demo.demo)
_command(check.check, launch=True)
_command(triage.triage)
_command(scan.scan, launch=True)
_command(attach.attach)
app.add_typer(cache.app)
