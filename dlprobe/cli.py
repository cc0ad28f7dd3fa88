"""The command line's entry point: plain `dlprobe run` lines parsed without typer (commands/run_fast.py), the rest by
typer (commands/app.py); the one place that turns errors into exit codes."""

from __future__ import annotations

import sys
from typing import Any

from dlprobe.commands import run_fast
from dlprobe.errors import USAGE_EXIT_CODE, DlprobeError


def __getattr__(name: str) -> Any:
    """`dlprobe.cli.app`, the typer app (dlprobe/commands/app.py), imported on first use: `dlprobe run` with plain
    arguments starts its script without it."""
    if name == "app":
        from dlprobe.commands.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    import typer

    from dlprobe.commands.app import app

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
    # `dlprobe run` with plain arguments is parsed without typer, so the script starts before typer is imported;
    # run_fast hands everything else (help, usage errors, other commands) to typer here.
    fast = run_fast.main(sys.argv[1:])
    if fast is not None:
        run_fast.exit_now(fast)
    import typer

    from dlprobe.commands.app import app

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
