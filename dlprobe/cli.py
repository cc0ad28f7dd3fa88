"""The command line: assembles one typer command per module of `dlprobe.commands`; one place turns errors into
exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import typer

from dlprobe import __version__
from dlprobe.commands import attach, cache, check, demo, report, run, scan, triage, tune
from dlprobe.commands.options import SCRIPT_COMMAND, DlprobeCommand, LaunchCommand, flowed
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


def _command(function: Callable[..., Any], launch: bool = False) -> None:
    """Register a command; one that runs a target takes everything after it as the target's own."""
    settings: dict[str, Any] = {"cls": LaunchCommand, "context_settings": SCRIPT_COMMAND} if launch else {}
    app.command(help=flowed(function.__doc__), **{"cls": DlprobeCommand, **settings})(function)


# In the order a user meets them.
_command(run.run, launch=True)
_command(report.report)
_command(tune.tune, launch=True)
_command(demo.demo)
_command(check.check, launch=True)
_command(triage.triage)
_command(scan.scan, launch=True)
_command(attach.attach)
app.add_typer(cache.app)


def _usage_hint(exc: Any) -> str:
    """The usage line of the command the user mistyped, and where its help is: `dlprobe run SCRIPT ...; see ...`."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None:  # click's parser raises some (an option missing its value) before it has a context
        return f"see {' '.join(_command_words())} --help"
    names = []
    while ctx.parent is not None:  # the root's own name is how it was started (python -m dlprobe): say dlprobe
        names.append(ctx.info_name)
        ctx = ctx.parent
    path = " ".join(["dlprobe", *reversed(names)])
    usage = " ".join(exc.ctx.command.collect_usage_pieces(exc.ctx))
    return f"{path} {usage}; see {path} --help"


def _command_words() -> list[str]:
    """`dlprobe` and the (sub)command names that start this command line: dlprobe cache clear."""
    words = ["dlprobe"]
    command: Any = typer.main.get_command(app)
    for word in sys.argv[1:]:
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            break
        words.append(word)
    return words


def _usage_message(exc: Any) -> str:
    """click's message in dlprobe's words: lower case, no full stop, an argument named as the usage line names it."""
    message = str(exc.format_message()).strip().rstrip(".")
    param = getattr(exc, "param", None)
    if param is not None and getattr(param, "param_type_name", None) == "argument" and param.name:
        message = message.replace(f"'{param.name}'", (param.metavar or param.name).upper())
    return message[:1].lower() + message[1:]


def _print_error(message: str, hint: str) -> None:
    # rich's console is imported only when there is an error to print: `dlprobe run` starts the script first.
    from dlprobe.console import print_error

    print_error(message, hint)


def main() -> None:
    """Console entry point: typer for parsing, then one place that turns every error a user can fix, dlprobe's own
    and click's usage errors alike, into an `error:` line, a `hint:` line and an exit code."""
    try:
        # With standalone_mode off, click returns a command's exit code instead of raising it.
        code = app(standalone_mode=False)
    except DlprobeError as exc:
        _print_error(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:
        # click's usage errors (missing argument, unknown option or command, bad value) are ClickExceptions of the
        # click that typer vendors (typer._click, a private module), so they are known by their attributes.
        if not (callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code")):
            raise
        usage = hasattr(exc, "ctx")  # a UsageError; a bare ClickException (a file click could not open) has none
        message = _usage_message(exc)
        if message:  # empty for `dlprobe` alone: its help is printed already (no_args_is_help), as the message
            _print_error(message, _usage_hint(exc) if usage else "")
        sys.exit(USAGE_EXIT_CODE if usage else exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
