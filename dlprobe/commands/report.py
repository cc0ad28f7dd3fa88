"""`dlprobe report`: render a saved run directory again (summary, report.json, report.html, plot), or merge several
(one per node of a job) into one job report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dlprobe.commands.options import json_option

if TYPE_CHECKING:
    from dlprobe.analysis.report.schema import Report


def report(
    run_dirs: list[str] = typer.Argument(
        ..., help="A run directory made by `dlprobe run`; several (one per node of a job) merge into one job report."
    ),
    json_path: str | None = json_option("Also write the report as JSON to this path."),
    html_path: str | None = typer.Option(
        None, "--html", help="Also write the self-contained page (report.html) to this path, e.g. to attach to a bug."
    ),
    trace_path: str | None = typer.Option(
        None, "--trace", help="Also write trace.json (Perfetto, chrome://tracing) here; several DIRs merge into one."
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Every finding's detail and evidence in the summary, not only its key numbers."
    ),
) -> None:
    """Render the summary, report.json, report.html and plot again from a saved run directory, or merge the run
    directories of a several-node job into one report."""
    import shutil

    from dlprobe.commands.outputs import write_job_outputs, write_outputs
    from dlprobe.console import out_console
    from dlprobe.errors import DlprobeError
    from dlprobe.rundir.files import check_own_dir, open_run_dir
    from dlprobe.rundir.handle import RunDir

    paths = [open_run_dir(run_dir) for run_dir in run_dirs]
    if html_path and Path(html_path).is_dir():
        raise DlprobeError(f"--html {html_path} is a directory", hint="give a file name, e.g. --html run.html")
    if trace_path and Path(trace_path).is_dir():
        raise DlprobeError(f"--trace {trace_path} is a directory", hint="give a file name, e.g. --trace job.json")
    if len(paths) > 1:
        report = write_job_outputs(paths, out_console(), json_path, html_path, verbose)
        _write_trace(paths, report, trace_path)
        return
    path = paths[0]
    # report.json, the page and the plot are written into it: only into a folder no one else can plant links in
    check_own_dir(path, "the run directory")
    report = write_outputs(path, out_console(), json_path, verbose=verbose)
    _write_trace(paths, report, trace_path)
    if html_path:
        page = RunDir(path).report_html
        try:
            if Path(html_path).resolve() != page.resolve():
                shutil.copyfile(page, html_path)
        except OSError as exc:
            raise DlprobeError(
                f"cannot write --html {html_path}: {exc.strerror or exc}",
                hint=f"the page is still saved in {page}" if page.exists() else "pick a writable path",
            ) from None


def _write_trace(paths: list[Path], report: Report, trace_path: str | None) -> None:
    """--trace: the runs' trace at the path asked for (after the report, which it never costs)."""
    if not trace_path:
        return
    from dlprobe.analysis.report.trace import build_trace
    from dlprobe.analysis.run.model import load_run
    from dlprobe.errors import DlprobeError
    from dlprobe.render.trace_file import trace_problem

    problems = trace_problem(Path(trace_path), lambda: build_trace([load_run(path) for path in paths], report))
    if problems:
        raise DlprobeError(
            f"--trace {trace_path}: {problems[0]}", hint="the report above is complete; pick a writable path"
        )
