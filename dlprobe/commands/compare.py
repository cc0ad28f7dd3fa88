"""`dlprobe compare`: two saved runs side by side (e.g. the same script under two --start-method)."""

from __future__ import annotations

import typer

from dlprobe.commands.options import json_option


def compare(
    run_a: str = typer.Argument(..., help="A run directory made by `dlprobe run` (column A)."),
    run_b: str = typer.Argument(..., help="Another run directory (column B)."),
    json_path: str | None = json_option("Also write the comparison as JSON to this path."),
) -> None:
    """Show two runs side by side: per loader the start method, memory per worker (USS and PSS), time to the first
    batch and throughput; per run how it ended, and the warnings and errors one has and the other has not.

    Made for `dlprobe run --start-method forkserver train.py` against the script's own method; any two runs
    compare. Nothing is written into the run directories.
    """
    import json

    from dlprobe.analysis.report.build import report_for
    from dlprobe.analysis.report.compare import compare as compare_runs
    from dlprobe.analysis.report.compare import run_side
    from dlprobe.atomic import write_text_atomic
    from dlprobe.console import out_console
    from dlprobe.errors import DlprobeError
    from dlprobe.render.compare_table import compare_summary
    from dlprobe.rundir.files import open_run_dir

    sides = []
    for path in (open_run_dir(run_a), open_run_dir(run_b)):
        run, report = report_for(path)
        sides.append(run_side(run, report))
    comparison = compare_runs(sides[0], sides[1])
    out_console().print(compare_summary(comparison))
    if json_path:
        try:
            write_text_atomic(json_path, json.dumps(comparison, indent=2, default=str) + "\n")
        except OSError as exc:
            raise DlprobeError(
                f"cannot write --json {json_path}: {exc.strerror or exc}", hint="pick a writable path"
            ) from None
