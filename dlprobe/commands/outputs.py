"""Analyzes a run, then writes its outputs: report.json, report.html, trace.json, stacks.speedscope.json, the plot,
an optional --json copy, and the terminal summary. The only place that hands the loaded run to the analysis views
(`analysis/report/timeline.py`, `trace.py`, `speedscope.py`, `memory_plot.py`) and their results to `render/`.

Each output is a view of the report: one that fails is named in the terminal and under "output_problems" in
report.json, and never costs the others (report.json is written first, and again with the problems)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.markup import escape

from dlprobe.analysis import failure_message, failure_where
from dlprobe.analysis.report.build import job_report_for, report_for
from dlprobe.analysis.report.schema import OutputProblem, Report
from dlprobe.analysis.report.speedscope import build_speedscope
from dlprobe.analysis.report.timeline import page_timeline
from dlprobe.analysis.report.trace import build_trace
from dlprobe.analysis.run.model import RunData
from dlprobe.errors import DlprobeError
from dlprobe.render.html import html_problem
from dlprobe.render.terminal import run_summary
from dlprobe.render.trace_file import speedscope_problem, trace_problem
from dlprobe.rundir.files import read_json, write_json, write_json_option
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    PLOT_FILE,
    REPORT_HTML_FILE,
    STACKS_SPEEDSCOPE_FILE,
    TRACE_FILE,
)


def output_problem(output: str, exc: Exception) -> OutputProblem:
    """One output that could not be written, as report.json's "output_problems" lists it: the output, one
    sentence, and where dlprobe raised."""
    where = failure_where(exc)
    message = failure_message(exc)
    return {"output": output, "problem": f"could not write {output}: {type(exc).__name__}: {message} (at {where})"}


def _print_summary(
    console: Console, report: Report, run_dir: str | None, problems: list[OutputProblem], verbose: bool = False
) -> None:
    try:
        console.print(run_summary(report, run_dir, verbose))
    except Exception as exc:  # the summary is a view: the files are written, the exit code stays the script's
        problems.append(output_problem("the terminal summary", exc))
        findings = report.get("findings") or []
        # soft_wrap: a path broken across lines cannot be pasted
        console.print(
            f"dlprobe: {len(findings)} finding(s); the full report is in {run_dir or 'report.json'}", soft_wrap=True
        )


def _write_report(run_dir: Path, report: Report) -> None:
    try:
        write_json(RunDir(run_dir).report, report)
    except OSError as exc:  # a full or read-only disk: the user's to fix, and `dlprobe report` writes it again
        raise DlprobeError(
            f"cannot write {RunDir(run_dir).report}: {exc.strerror or exc}",
            hint=f"free space or make the directory writable, then `dlprobe report {run_dir}` writes it again",
        ) from None


def read_check(run_dir: Path) -> dict[str, Any] | None:
    """check.json's verdict, where `dlprobe check` wrote one (the page shows it); None when unreadable."""
    check = RunDir(run_dir).check
    if not check.exists():
        return None
    try:
        return cast(dict[str, Any], read_json(check))
    except (OSError, ValueError):
        return None


def run_html_problem(path: Path, run: RunData | None, report: Report, check: dict[str, Any] | None = None) -> list[str]:
    """The page of one run (with check.json's verdict when the run has one); what went wrong, for the terminal. A
    timeline that cannot be built is named on the page rather than losing the page."""
    if check is None and run is not None:
        check = read_check(run.path)
    timeline, problems = page_timeline(run, report)
    return html_problem(path, report, timeline, check, problems)


def write_outputs(
    run_dir: Path,
    console: Console | None,
    json_path: str | None = None,
    plot_in_background: bool = False,
    verbose: bool = False,
) -> Report:
    """Analyze the run and write everything; a failing page, plot, summary or --json path is reported, not fatal.
    The summary is a screen by default; `verbose` prints every finding's evidence too (report.json and the page
    always have it).

    With `plot_in_background` (`dlprobe run`) memory.png is drawn by a detached process and appears a second or
    two after this returns; `dlprobe report` draws it here."""
    run, report = report_for(run_dir)
    files = RunDir(run_dir)
    _write_report(run_dir, report)
    problems: list[OutputProblem] = []
    try:
        html_failure = run_html_problem(files.report_html, run, report)
    except Exception as exc:  # html_problem catches the page's own failures; this is the check.json read around it
        html_failure = [output_problem(REPORT_HTML_FILE, exc)["problem"]]
    problems += [{"output": REPORT_HTML_FILE, "problem": line} for line in html_failure]
    trace_failure = trace_problem(files.trace, lambda: build_trace([run], report))
    problems += [{"output": TRACE_FILE, "problem": line} for line in trace_failure]
    problems += [
        {"output": STACKS_SPEEDSCOPE_FILE, "problem": line}
        for line in speedscope_problem(files.stacks_speedscope, lambda: build_speedscope(run))
    ]
    # No DataLoader, nothing to plot: skipping it saves a second of matplotlib start-up on short scripts.
    if run.loaders and plot_in_background:
        from dlprobe.analysis.report.memory_plot import memory_plot
        from dlprobe.render.plot import plot_in_background as start_plot

        try:
            start_plot(run_dir, memory_plot(run, report))
        except Exception as exc:  # a plotting problem must not lose the report
            problems.append(output_problem(f"{PLOT_FILE} (dlprobe report {run_dir} draws it)", exc))
    elif run.loaders:
        try:
            from dlprobe.analysis.report.memory_plot import memory_plot
            from dlprobe.render.plot import plot_memory

            plot_memory(memory_plot(run, report), files.plot)
        except Exception as exc:  # a plotting problem must not lose the report
            problems.append(output_problem(PLOT_FILE, exc))
    if console is not None:
        _print_summary(console, report, str(run_dir), problems, verbose)
    if problems:  # the file people and CI read says what is missing too
        report["output_problems"] = problems
        _write_report(run_dir, report)
    if console is not None:
        for problem in problems:
            console.print("[yellow]warning:[/] " + escape(problem["problem"]), markup=True)
    if json_path:
        write_json_option(json_path, report, f"the report is still saved in {files.report}")
    return report


def write_job_outputs(
    run_dirs: list[Path],
    console: Console | None,
    json_path: str | None = None,
    html_path: str | None = None,
    verbose: bool = False,
) -> Report:
    """The run directories of a several-node job as one report: printed, and written to --json and --html when
    given (each node's own report.json and report.html stay that node's)."""
    _, report = job_report_for(run_dirs)
    # The merged page has the verdict, findings and the job's tables; each node's timelines stay on its own page.
    problems: list[OutputProblem] = []
    if html_path:
        problems += [{"output": html_path, "problem": line} for line in html_problem(Path(html_path), report)]
    if console is not None:
        _print_summary(console, report, None, problems, verbose)
        dirs = escape(", ".join(map(str, run_dirs)))
        console.print(f"[dim]Job report of {len(run_dirs)} run directories: {dirs}[/]", markup=True)
        for problem in problems:
            console.print("[yellow]warning:[/] " + escape(problem["problem"]), markup=True)
    if problems:
        report["output_problems"] = problems
    if json_path:
        write_json_option(json_path, report, "the job report was printed above")
    return report
