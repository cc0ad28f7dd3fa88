"""The command line: assembles one typer command per module of `dlprobe.commands`; one place turns errors into
exit codes."""

from __future__ import annotations

import sys

import typer

from dlprobe import __version__
from dlprobe.commands import attach, cache, check, demo, report, run, scan, triage, tune
from dlprobe.commands.options import SCRIPT_COMMAND, LaunchCommand
from dlprobe.errors import USAGE_EXIT_CODE, DlprobeError

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


# In the order a user meets them; commands that run a script take everything after it as the script's own.
app.command(cls=LaunchCommand, context_settings=SCRIPT_COMMAND)(run.run)
app.command()(report.report)
app.command(cls=LaunchCommand, context_settings=SCRIPT_COMMAND)(tune.tune)
app.command()(demo.demo)
app.command(cls=LaunchCommand, context_settings=SCRIPT_COMMAND)(check.check)
app.command()(triage.triage)
app.command(cls=LaunchCommand, context_settings=SCRIPT_COMMAND)(scan.scan)
app.command()(attach.attach)
app.add_typer(cache.app)


def main() -> None:
    """Console entry point: typer for parsing, then one place for dlprobe's own errors."""
    try:
        # With standalone_mode off, click returns a command's exit code instead of raising it.
        code = app(standalone_mode=False)
    except DlprobeError as exc:
        from dlprobe.console import print_error

        print_error(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:
        # click's usage errors (missing argument, bad option); typer >= 0.2x vendors click, so no import here.
        show = getattr(exc, "show", None)
        if callable(show) and hasattr(exc, "exit_code"):
            show()
            sys.exit(USAGE_EXIT_CODE)
        raise
    sys.exit(code if isinstance(code, int) else 0)
