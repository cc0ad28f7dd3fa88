"""The command line: thin typer commands over plain functions; one place turns errors into exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from dlprobe import __version__
from dlprobe.errors import USAGE_EXIT_CODE, DlprobeError

app = typer.Typer(
    name="dlprobe",
    help="Find out why a PyTorch DataLoader is slow, hangs, eats memory or gets killed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Options after the script belong to the script: `dlprobe run train.py --epochs 3`.
SCRIPT_COMMAND = {"allow_interspersed_args": False, "ignore_unknown_options": True}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dlprobe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Find out why a PyTorch DataLoader is slow, hangs, eats memory or gets killed."""


def err_console() -> Console:
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console.width = 120  # logs and CI: wide enough that tables do not wrap
    return console


@app.command(context_settings=SCRIPT_COMMAND)
def run(
    script: str = typer.Argument(..., help="The training script, run unmodified."),
    script_args: list[str] | None = typer.Argument(None, help="Arguments passed to the script as they are."),
    out: str | None = typer.Option(None, "--out", "-o", help="Run directory (default ./dlprobe-runs/NAME-TIME)."),
    json_path: str | None = typer.Option(None, "--json", help="Also write the report as JSON to this path."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view and no summary; just the run directory."),
) -> None:
    """Run SCRIPT under the probe and report on every DataLoader it creates.

    dlprobe's own output goes to stderr; the script's stdout, stderr and exit code come through unchanged.
    """
    from dlprobe.outputs import write_outputs
    from dlprobe.supervisor import RunOptions, run_script

    outcome = run_script(RunOptions(script, list(script_args or []), out, live=not quiet))
    write_outputs(outcome.run_dir, None if quiet else err_console(), json_path)
    raise typer.Exit(outcome.exit_code)


@app.command()
def report(
    run_dir: str = typer.Argument(..., help="A run directory made by `dlprobe run`."),
    json_path: str | None = typer.Option(None, "--json", help="Also write the report as JSON to this path."),
) -> None:
    """Render the summary, report.json and plot again from a saved run directory."""
    from dlprobe.outputs import write_outputs
    from dlprobe.rundir import open_run_dir

    write_outputs(open_run_dir(run_dir), Console(highlight=False), json_path)


@app.command(context_settings=SCRIPT_COMMAND)
def tune(
    script: str = typer.Argument(..., help="The training script; it runs up to its DataLoader and does not train."),
    script_args: list[str] | None = typer.Argument(None, help="Arguments passed to the script as they are."),
    budget: str = typer.Option("120s", "--budget", help="Time for the whole sweep, e.g. 60s or 5m."),
    batches: int = typer.Option(40, "--batches", help="Batches timed per trial."),
    loader: int = typer.Option(0, "--loader", help="Which DataLoader to tune, by the order the script iterates them."),
    max_workers: int | None = typer.Option(
        None, "--max-workers", help="Highest num_workers to try (default 2x cores)."
    ),
    tolerance: float = typer.Option(0.05, "--tolerance", help="Within this share of the best counts as as fast."),
    out: str | None = typer.Option(None, "--out", "-o", help="Directory for the trials (default ./dlprobe-runs/...)."),
    json_path: str | None = typer.Option(None, "--json", help="Also write the trials and `recommended` here."),
) -> None:
    """Measure the script's DataLoader under other num_workers, prefetch_factor and pin_memory settings."""
    from dlprobe.tune.output import tune_and_report
    from dlprobe.units import parse_duration

    try:
        budget_s = parse_duration(budget)
    except ValueError as exc:
        raise DlprobeError(str(exc), hint="e.g. --budget 120s") from None
    raise typer.Exit(
        tune_and_report(
            script,
            list(script_args or []),
            budget_s,
            batches,
            loader,
            max_workers,
            tolerance,
            out,
            json_path,
            err_console(),
        )  # fmt: skip
    )


@app.command()
def demo(
    out: str | None = typer.Option(None, "--out", "-o", help="Where to keep the two demo runs."),
) -> None:
    """Probe a bundled training script twice: a leaky dataset, then the same data in numpy arrays."""
    from dlprobe.demo.runner import run_demo

    raise typer.Exit(run_demo(Path(out) if out else None, err_console()))


def main() -> None:
    """Console entry point: typer for parsing, then one place for dlprobe's own errors."""
    try:
        # With standalone_mode off, click returns a command's exit code instead of raising it.
        code = app(standalone_mode=False)
    except DlprobeError as exc:
        console = err_console()
        console.print(f"[bold red]error:[/] {exc.message}", soft_wrap=True)
        if exc.hint:
            console.print(f"[bold]hint:[/] {exc.hint}", soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(USAGE_EXIT_CODE)
        raise
    sys.exit(code if isinstance(code, int) else 0)
