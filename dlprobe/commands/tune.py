"""`dlprobe tune`: run the sweep, then write tune.json, tune.png, report.html, a --json copy, and the table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from dlprobe.commands.options import MODULE_HELP, SCRIPT_ARGS, json_option, one_process_only, out_option
from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import LAUNCH_SCRIPT
from dlprobe.tune.loop import LOOP_STEPS

if TYPE_CHECKING:
    from rich.console import Console


def tune(
    ctx: typer.Context,
    script: str = typer.Argument(
        ...,
        help="The training script (with -m a module); it runs up to its DataLoader and a few steps of its loop (timed, "
        "see --loop-steps), then its DataLoader is measured instead of training.",
    ),
    script_args: list[str] | None = SCRIPT_ARGS,
    module: bool = typer.Option(False, "-m", help=MODULE_HELP),
    budget: str = typer.Option("120s", "--budget", help="Time for the whole sweep, e.g. 60s or 5m."),
    batches: int = typer.Option(
        40, "--batches", help="Most batches timed per trial (one ends sooner once its rate is steady)."
    ),
    loader: int = typer.Option(0, "--loader", help="Which DataLoader to tune, by the order the script iterates them."),
    max_workers: int | None = typer.Option(
        None,
        "--max-workers",
        help="Highest num_workers to try (default 32; the search tries fewer where its model says more cannot pay).",
    ),
    tolerance: float = typer.Option(0.05, "--tolerance", help="Within this share of the best counts as as fast."),
    loop_steps: int = typer.Option(
        LOOP_STEPS,
        "--loop-steps",
        help="Steps of the script's own training loop to time before the trials, so the advice stops where the loop "
        "bounds the job. They run for real: what the loop does in them (an optimizer step, a log line, a "
        "checkpoint) happens. 0: time the loader alone.",
    ),
    out: str | None = out_option("Directory for the trials (default ./dlprobe-runs/...)."),
    json_path: str | None = json_option("Also write the trials and `recommended` here."),
) -> None:
    """Measure the script's DataLoader under other num_workers, prefetch_factor and pin_memory settings."""
    from dlprobe.console import err_console
    from dlprobe.units import parse_duration

    launch = one_process_only(ctx, module, "tune")
    try:
        budget_s = parse_duration(budget)
    except ValueError as exc:
        raise DlprobeError(str(exc), hint="e.g. --budget 120s") from None
    args = list(script_args or [])
    raise typer.Exit(
        tune_and_report(
            script,
            args,
            budget_s,
            batches,
            loader,
            max_workers,
            tolerance,
            out,
            json_path,
            err_console(),
            launch,
            loop_steps,
        )
    )


def tune_and_report(
    script: str,
    args: list[str],
    budget_s: float,
    batches: int,
    loader: int,
    max_workers: int | None,
    tolerance: float,
    out: str | None,
    json_path: str | None,
    console: Console | None,
    launch: str = LAUNCH_SCRIPT,
    loop_steps: int = LOOP_STEPS,
) -> int:
    """0 with a recommendation, 1 without one (every trial failed or none fits in memory)."""
    from rich.markup import escape

    from dlprobe.render.tune_table import tune_summary
    from dlprobe.rundir.files import write_json_option
    from dlprobe.rundir.handle import RunDir
    from dlprobe.rundir.schema import REPORT_HTML_FILE, TUNE_PLOT_FILE
    from dlprobe.supervisor.tune_sweep import TuneOptions, run_tune

    if loop_steps < 0:
        raise DlprobeError("--loop-steps must be 0 or more", hint="e.g. --loop-steps 8, or 0 to time the loader alone")
    options = TuneOptions(script, args, out, budget_s, batches, loader, max_workers, tolerance, launch, loop_steps)
    result = run_tune(options)
    files = RunDir(result["dir"])
    plot_path: str | None = str(files.tune_plot)
    problem = None
    try:
        from dlprobe.render.tune_plot import plot_tune

        plot_tune(result, files.tune_plot)
    except Exception as exc:  # the numbers matter more than the picture
        plot_path, problem = None, f"could not draw {TUNE_PLOT_FILE}: {exc}"
    problems = [problem] if problem else []
    try:
        from dlprobe.render.html_page import write_page
        from dlprobe.render.html_results import render_tune_html

        write_page(files.report_html, render_tune_html(result))
    except Exception as exc:  # the page is a view of tune.json, which is already written
        problems.append(f"could not write {REPORT_HTML_FILE}: {type(exc).__name__}: {exc}")
    if console is not None:
        console.print(tune_summary(result, plot_path))
        for line in problems:
            console.print(f"[yellow]warning:[/] {escape(line)}", markup=True)
    if json_path:
        write_json_option(json_path, result, f"the result is still saved in {files.tune_result}")
    return 0 if result["recommended"] else 1
