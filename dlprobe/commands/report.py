"""`dlprobe report`: render a saved run directory again (summary, report.json, plot), or merge several (one per
node of a job) into one job report."""

from __future__ import annotations

import typer

from dlprobe.commands.options import json_option


def report(
    run_dirs: list[str] = typer.Argument(
        ..., help="A run directory made by `dlprobe run`; several (one per node of a job) merge into one job report."
    ),
    json_path: str | None = json_option("Also write the report as JSON to this path."),
) -> None:
    """Render the summary, report.json and plot again from a saved run directory, or merge the run directories of
    a several-node job into one report."""
    from dlprobe.console import out_console
    from dlprobe.render.run_outputs import write_job_outputs, write_outputs
    from dlprobe.rundir.files import open_run_dir

    paths = [open_run_dir(run_dir) for run_dir in run_dirs]
    if len(paths) == 1:
        write_outputs(paths[0], out_console(), json_path)
    else:
        write_job_outputs(paths, out_console(), json_path)
