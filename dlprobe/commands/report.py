"""`dlprobe report`: render a saved run directory again (summary, report.json, plot)."""

from __future__ import annotations

import typer

from dlprobe.commands.options import json_option


def report(
    run_dir: str = typer.Argument(..., help="A run directory made by `dlprobe run`."),
    json_path: str | None = json_option("Also write the report as JSON to this path."),
) -> None:
    """Render the summary, report.json and plot again from a saved run directory."""
    from dlprobe.console import out_console
    from dlprobe.render.run_outputs import write_outputs
    from dlprobe.rundir.files import open_run_dir

    write_outputs(open_run_dir(run_dir), out_console(), json_path)
