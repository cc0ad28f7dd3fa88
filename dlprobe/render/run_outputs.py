"""Writes a run's outputs: report.json, report.html, the plot, an optional --json copy, and the terminal summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from dlprobe.analysis.report import job_report_for, report_for
from dlprobe.render.html import html_problem
from dlprobe.render.terminal import run_summary
from dlprobe.render.trace_file import speedscope_problem, trace_problem
from dlprobe.rundir.files import write_json, write_json_option
from dlprobe.rundir.schema import PLOT_FILE, REPORT_FILE, REPORT_HTML_FILE, STACKS_SPEEDSCOPE_FILE, TRACE_FILE


def write_outputs(
    run_dir: Path, console: Console | None, json_path: str | None = None, plot_in_background: bool = False
) -> dict[str, Any]:
    """Analyze the run and write everything; a failing plot or --json path is reported, not fatal.

    With `plot_in_background` (`dlprobe run`) memory.png is drawn by a detached process and appears a second or
    two after this returns; `dlprobe report` draws it here."""
    run, report = report_for(run_dir)
    write_json(run_dir / REPORT_FILE, report)
    problems = []
    problems += html_problem(run_dir / REPORT_HTML_FILE, run, report)
    problems += trace_problem(run_dir / TRACE_FILE, [run], report)
    problems += speedscope_problem(run_dir / STACKS_SPEEDSCOPE_FILE, run)
    # No DataLoader, nothing to plot: skipping it saves a second of matplotlib start-up on short scripts.
    if run.loaders and plot_in_background:
        from dlprobe.render.plot import plot_in_background as start_plot

        try:
            start_plot(run_dir)
        except OSError as exc:
            problems.append(f"could not start drawing {PLOT_FILE}: {exc} (dlprobe report {run_dir} draws it)")
    elif run.loaders:
        try:
            from dlprobe.render.plot import plot_memory

            plot_memory(run, run_dir / PLOT_FILE, report)
        except Exception as exc:  # a plotting problem must not lose the report
            problems.append(f"could not draw {PLOT_FILE}: {exc}")
    if console is not None:
        console.print(run_summary(report, str(run_dir)))
        for problem in problems:
            console.print(f"[yellow]warning:[/] {problem}")
    if json_path:
        write_json_option(json_path, report, f"the report is still saved in {run_dir / REPORT_FILE}")
    return report


def write_job_outputs(
    run_dirs: list[Path], console: Console | None, json_path: str | None = None, html_path: str | None = None
) -> dict[str, Any]:
    """The run directories of a several-node job as one report: printed, and written to --json and --html when
    given (each node's own report.json and report.html stay that node's)."""
    _, report = job_report_for(run_dirs)
    # The merged page has the verdict, findings and the job's tables; each node's timelines stay on its own page.
    problems = html_problem(Path(html_path), None, report) if html_path else []
    if console is not None:
        console.print(run_summary(report))
        console.print(f"[dim]Job report of {len(run_dirs)} run directories: {', '.join(map(str, run_dirs))}[/]")
        for problem in problems:
            console.print(f"[yellow]warning:[/] {problem}")
    if json_path:
        write_json_option(json_path, report, "the job report was printed above")
    return report
