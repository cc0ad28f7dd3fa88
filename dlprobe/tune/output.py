"""Runs a tune and writes its outputs: tune.json, tune.png, an optional --json copy, and the terminal table."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from dlprobe.render.tune_table import tune_summary
from dlprobe.rundir import write_json_option
from dlprobe.tune.command import PLOT_FILE, TuneOptions, run_tune


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
) -> int:
    """0 with a recommendation, 1 without one (every trial failed or none fits in memory)."""
    options = TuneOptions(script, args, out, budget_s, batches, loader, max_workers, tolerance)
    result = run_tune(options)
    plot_path: str | None = str(Path(result["dir"]) / PLOT_FILE)
    problem = None
    try:
        from dlprobe.render.tune_plot import plot_tune

        plot_tune(result, Path(result["dir"]) / PLOT_FILE)
    except Exception as exc:  # the numbers matter more than the picture
        plot_path, problem = None, f"could not draw {PLOT_FILE}: {exc}"
    if console is not None:
        console.print(tune_summary(result, plot_path))
        if problem:
            console.print(f"[yellow]warning:[/] {problem}")
    if json_path:
        write_json_option(json_path, result, f"the result is still saved in {result['dir']}/tune.json")
    return 0 if result["recommended"] else 1
