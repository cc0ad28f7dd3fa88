"""The command line: thin typer commands over plain functions; one place turns errors into exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

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
    hang_timeout: float = typer.Option(
        60.0, "--hang-timeout", help="Seconds without a batch before stacks are dumped as a hang; 0 turns it off."
    ),
    on_hang: str = typer.Option("wait", "--on-hang", help="After a hang is recorded: wait (keep waiting) or stop."),
) -> None:
    """Run SCRIPT under the probe and report on every DataLoader it creates.

    dlprobe's own output goes to stderr; the script's stdout, stderr and exit code come through unchanged.
    """
    from dlprobe.outputs import write_outputs
    from dlprobe.supervisor import RunOptions, run_script

    options = RunOptions(script, list(script_args or []), out, not quiet, hang_timeout=hang_timeout, on_hang=on_hang)
    outcome = run_script(options)
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


from dlprobe.check.cli import check as _check  # noqa: E402  (one module owns the long option list)

app.command(name="check", context_settings=SCRIPT_COMMAND)(_check)


@app.command()
def triage(
    logfile: str = typer.Argument(..., help="The failed run's stderr (or `-` for stdin); gzip ok."),
    json_path: str | None = typer.Option(None, "--json", help="Also write the result as JSON to this path."),
    kernel_log: str | None = typer.Option(
        None, "--kernel-log", help="Read OOM kills from this saved `dmesg`/kern.log instead of this machine's."
    ),
    no_machine: bool = typer.Option(False, "--no-machine", help="The run failed elsewhere: do not check this machine."),
) -> None:
    """Explain a DataLoader failure that already happened, from its log: causes ranked, evidence, fix.

    Exit code 0 when causes were found, 1 when the log shows no DataLoader failure, 2 for usage errors.
    """
    from dlprobe.triage.command import exit_code, triage_log_to

    result = triage_log_to(logfile, json_path, out_console(), not no_machine, kernel_log)
    raise typer.Exit(exit_code(result))


def out_console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 120
    return console


@app.command(context_settings=SCRIPT_COMMAND)
def scan(
    script: str = typer.Argument(..., help="The training script; it runs until its DataLoader, then stops."),
    script_args: list[str] | None = typer.Argument(None, help="Arguments passed to the script as they are."),
    loader: int = typer.Option(0, "--loader", help="Which DataLoader: 0 is the first one the script iterates."),
    workers: int | None = typer.Option(None, "--workers", "-w", help="Worker processes (default: usable cores)."),
    sample_timeout: str | None = typer.Option(None, "--sample-timeout", help="Time limit per sample (default 60s)."),
    range_text: str | None = typer.Option(None, "--range", help="Only indices START:STOP (either may be left out)."),
    sample: int | None = typer.Option(None, "--sample", help="Only N indices picked at random."),
    seed: int = typer.Option(0, "--seed", help="Seed for --sample."),
    start_method: str = typer.Option("auto", "--start-method", help="auto (the loader's), fork, spawn or forkserver."),
    json_path: str | None = typer.Option(None, "--json", help="Write the result as JSON to this path."),
    exclude_out: str | None = typer.Option(None, "--exclude-out", help="Write the bad indices to this file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no summary."),
) -> None:
    """Check every sample of the script's DataLoader dataset without training; list the bad ones and why.

    Exit code 0 when every sample is good, 1 when some are bad, 2 when the scan cannot run, 130 on Ctrl-C.
    """
    from dlprobe.scan.command import scan as run_scan_command
    from dlprobe.scan.options import build_options

    options = build_options(workers, sample_timeout, range_text, sample, seed, start_method)
    console = None if quiet else Console(highlight=False)
    code = run_scan_command(script, list(script_args or []), loader, options, json_path, exclude_out, console)
    raise typer.Exit(code)


def main() -> None:
    """Console entry point: typer for parsing, then one place for dlprobe's own errors."""
    try:
        # With standalone_mode off, click returns a command's exit code instead of raising it.
        code = app(standalone_mode=False)
    except DlprobeError as exc:
        console = err_console()
        # escape: messages quote user text such as "[tool.dlprobe]", which is not markup
        console.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        if exc.hint:
            console.print(f"[bold]hint:[/] {escape(exc.hint)}", soft_wrap=True)
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
