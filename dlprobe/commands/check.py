"""`dlprobe check`: run the script under the probe within its limits, gate it on rules, write the verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlprobe.commands.options import (
    MODULE_HELP,
    SCRIPT_ARGS,
    launch_kind,
    out_option,
    prom_listen_option,
    prom_textfile_option,
)
from dlprobe.errors import DlprobeError
from dlprobe.rundir.files import read_json, read_jsonl, write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    EV_STOP,
    LAUNCH_MODULE,
    LAUNCH_SCRIPT,
    STOP_REASON_HANG,
    HangRecord,
    Result,
)

if TYPE_CHECKING:  # the rules pull in the analysis: imported when a check runs, not for every command's start
    from rich.console import Console

    from dlprobe.analysis.report.schema import Report
    from dlprobe.check.config import CheckConfig
    from dlprobe.check.limits import Stop
    from dlprobe.check.rules import RuleResult

PASSED, FAILED, USAGE, SCRIPT_FAILED = 0, 1, 2, 3


def check(
    ctx: typer.Context,
    script: str = typer.Argument(
        ..., help="The training script, run unmodified; with -m a module; after -- any command (torchrun ...)."
    ),
    script_args: list[str] | None = SCRIPT_ARGS,
    module: bool = typer.Option(False, "-m", help=MODULE_HELP),
    config: str | None = typer.Option(
        None,
        "--config",
        "-c",
        help="TOML file of rules (default: the tool.dlprobe table of the nearest pyproject.toml).",
    ),
    max_batches: str | None = typer.Option(None, help="Stop the script cleanly after this many batches."),
    max_seconds: str | None = typer.Option(None, help='Stop the script after this long, e.g. "90s".'),
    max_worker_uss_growth: str | None = typer.Option(None, help='Limit on any worker\'s USS growth, e.g. "200 MB".'),
    max_worker_uss: str | None = typer.Option(None, help="Limit on any worker's peak USS."),
    max_total_pss: str | None = typer.Option(None, help="Limit on the peak PSS of the whole job."),
    max_shm_peak: str | None = typer.Option(None, help="Limit on the peak use of /dev/shm."),
    max_wait_fraction: str | None = typer.Option(None, help='Limit on the share of time waiting for data ("40%").'),
    max_first_batch_wait: str | None = typer.Option(None, help="Limit on the wait for the first batch."),
    hang_timeout: str | None = typer.Option(None, help="Fail, and stop the script, when no batch comes this long."),
    fail_on: list[str] | None = typer.Option(None, help="A finding code that fails the check (repeatable)."),
    fail_on_severity: str | None = typer.Option(None, help="Fail on any finding this severe (error, warning)."),
    baseline: str | None = typer.Option(None, help="A report.json of an earlier good run to compare with."),
    baseline_margin: str | None = typer.Option(None, help='Allowed regression against the baseline ("10%").'),
    update_baseline: bool = typer.Option(False, "--update-baseline", help="Write this run's report to --baseline."),
    junit: str | None = typer.Option(None, "--junit", help="Write JUnit XML (one testcase per rule) here."),
    out: str | None = out_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view and no run summary; only the verdict."),
    prom_textfile: str | None = prom_textfile_option(),
    prom_listen: str | None = prom_listen_option(),
) -> None:
    """Run SCRIPT under the probe within limits and gate it on rules: exit 0 pass, 1 fail, 2 bad usage, 3 the
    script itself failed.

    Rules come from --config, else the tool.dlprobe table of the nearest pyproject.toml; options given here
    override them.
    """
    from dlprobe.console import err_console

    given: dict[str, Any] = {
        "max_batches": max_batches,
        "max_seconds": max_seconds,
        "max_worker_uss_growth": max_worker_uss_growth,
        "max_worker_uss": max_worker_uss,
        "max_total_pss": max_total_pss,
        "max_shm_peak": max_shm_peak,
        "max_wait_fraction": max_wait_fraction,
        "max_first_batch_wait": max_first_batch_wait,
        "hang_timeout": hang_timeout,
        "fail_on": fail_on or None,
        "fail_on_severity": fail_on_severity,
        "baseline": baseline,
        "baseline_margin": baseline_margin,
    }
    overrides = {key: value for key, value in given.items() if value is not None}
    options = CheckOptions(script, list(script_args or []), config, overrides, out, junit, update_baseline, quiet)
    options.launch = launch_kind(ctx, module)
    options.prom_textfile, options.prom_listen = prom_textfile, prom_listen
    outcome = run_check(options, err_console())
    raise typer.Exit(outcome.exit_code)


@dataclass
class CheckOptions:
    script: str
    args: list[str] = field(default_factory=list)
    config_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # command-line options, already named as config keys
    out: str | None = None
    junit: str | None = None
    update_baseline: bool = False
    quiet: bool = False
    launch: str = LAUNCH_SCRIPT  # or LAUNCH_MODULE (-m), LAUNCH_COMMAND (after --)
    prom_textfile: str | None = None  # --prom-textfile DIR (supervisor/prom/)
    prom_listen: str | None = None  # --prom-listen [HOST:]PORT


@dataclass
class CheckOutcome:
    exit_code: int
    run_dir: Path
    rules: list[RuleResult]
    report: Report
    stop: Stop | None


def exit_code_for(rows: list[RuleResult], report: Report, stop: Stop | None) -> int:
    """3 when the script itself failed (its exit code is still in the report), else 1 if any rule failed."""
    from dlprobe.check.rules import failed, script_failed

    if script_failed(report, stop):
        return SCRIPT_FAILED
    return FAILED if failed(rows) else PASSED


def _stop_from_events(run_dir: Path) -> Stop | None:
    """The hooks' own stop, for a run that ended before the supervisor read the event."""
    from dlprobe.check.limits import Stop

    for ev in read_jsonl(RunDir(run_dir).events):
        if ev.get("ev") == EV_STOP:
            return Stop(str(ev.get("reason")), float(ev.get("t", 0.0)))
    return None


def _hang_stop(run_dir: Path) -> Stop | None:
    """The run's hang guard ended the run (--on-hang stop): a failed hang rule, with what the hang record measured.

    The guard stops at the hang it records last (result.json's "hangs" numbers it); its waited_s is the time since
    the last batch when the stall was recorded, and its loop state names the loader and the awaited worker.
    """
    from dlprobe.check.limits import Stop

    files = RunDir(run_dir)
    result_file = files.result
    result: Result = read_json(result_file) if result_file.exists() else {}
    if result.get("stop_reason") != STOP_REASON_HANG:
        return None
    stop = Stop("hang", float(result.get("ended_at", 0.0)))
    record_file = files.hang_record(int(result.get("hangs") or 0))
    try:
        record: HangRecord = read_json(record_file)
    except (OSError, ValueError):
        return stop  # the rule then says the stall was not measured rather than guess it
    loop = record.get("loop") or {}
    waited = record.get("waited_s")
    stop.stall_s = float(waited) if waited is not None else None
    stop.loader_id = loop.get("loader_id")
    stop.worker_id = loop.get("awaited_worker")
    return stop


def first_baseline_command(options: CheckOptions) -> str:
    """The one command that makes the missing baseline: this same check, with --update-baseline."""
    import shlex

    words = ["dlprobe", "check"]
    if options.config_path:
        words += ["--config", options.config_path]
    for key, value in options.overrides.items():
        for one in value if isinstance(value, list) else [value]:
            words += ["--" + key.replace("_", "-"), str(one)]
    words.append("--update-baseline")
    if options.launch == LAUNCH_SCRIPT:
        words.append(options.script)
    else:
        words += ["-m", options.script] if options.launch == LAUNCH_MODULE else ["--", options.script]
    return shlex.join(words + options.args)


def _baseline_for(config: CheckConfig, options: CheckOptions) -> Report | None:
    from dlprobe.check.baseline import load_baseline

    update = options.update_baseline
    if update and not config.baseline:
        raise DlprobeError(
            "--update-baseline needs a baseline file",
            hint='pass --baseline FILE, or set baseline = "FILE" in the config',
        )
    if config.baseline and not update:
        if not Path(config.baseline).exists() and not Path(config.baseline).is_symlink():
            raise DlprobeError(
                f"baseline {config.baseline}: no such file (a first run makes it from a good commit)",
                hint=f"make it once with `{first_baseline_command(options)}`, then commit it; or delete the baseline "
                "lines of the config to gate on its limits alone",
            )
        return load_baseline(config.baseline)
    return None


def run_check(options: CheckOptions, console: Console | None) -> CheckOutcome:
    from rich.markup import escape

    """Everything `dlprobe check` does; bad configs and baselines fail before the script starts."""
    from dlprobe.analysis.run.model import load_run
    from dlprobe.check.baseline import save_baseline
    from dlprobe.check.config import load_config
    from dlprobe.check.limits import RunWatch
    from dlprobe.check.rules import BASELINE_MEASURED, BASELINE_RULE, evaluate
    from dlprobe.commands.outputs import run_html_problem, write_outputs
    from dlprobe.render.check_table import check_summary
    from dlprobe.render.junit import write_junit
    from dlprobe.supervisor.run_options import RunOptions
    from dlprobe.supervisor.run_target import check_target, run_script

    config = load_config(options.config_path, options.overrides)
    check_target(options.script, options.launch, options.args)
    baseline = _baseline_for(config, options)
    junit_path = Path(options.junit) if options.junit else None
    if junit_path is not None and not junit_path.parent.is_dir():
        raise DlprobeError(f"cannot write --junit {options.junit}: no such directory {junit_path.parent}",
                           hint="create the directory first, or pass a path in an existing one")  # fmt: skip

    # Hangs are `dlprobe run`'s job (stacks, stuck worker, clean stop of the whole tree); the watch only
    # enforces max_batches and max_seconds.
    watch = RunWatch(config.max_batches, config.max_seconds)
    run_options = RunOptions(options.script, options.args, options.out, live=not options.quiet, env=watch.env(),
                             on_tick=watch.on_tick, launch=options.launch, prom_textfile=options.prom_textfile,
                             prom_listen=options.prom_listen)  # fmt: skip
    if config.hang_timeout is not None:
        run_options.hang_timeout = config.hang_timeout
        run_options.on_hang = "stop"
    outcome = run_script(run_options)
    report = write_outputs(outcome.run_dir, None if options.quiet else console)
    stop = watch.stop or _stop_from_events(outcome.run_dir) or _hang_stop(outcome.run_dir)
    rows = evaluate(config, report, stop, baseline, config.baseline or "")
    code = exit_code_for(rows, report, stop)

    files = RunDir(outcome.run_dir)
    write_json(
        files.check,
        {
            "exit_code": code,
            "passed": code == PASSED,
            "stop": stop.to_dict() if stop else None,
            "config": {key: config.raw[key] for key in config.raw},
            "config_sources": config.sources,
            "baseline": config.baseline if baseline is not None else None,
            "baseline_rule": f"{BASELINE_RULE} ({BASELINE_MEASURED})" if baseline is not None else None,
            "rules": [r.to_dict() for r in rows],
        },
    )
    # The page again, now with the check's verdict (write_outputs drew it before the rules were evaluated).
    page_problems = run_html_problem(files.report_html, load_run(outcome.run_dir), report)
    if console is not None:
        console.print(check_summary(rows, code, str(outcome.run_dir)))
        for problem in page_problems:  # the page is a view: it must not change the verdict or its exit code
            console.print(f"[yellow]warning:[/] {escape(problem)}", markup=True)
    problems = []
    if junit_path is not None:
        try:
            write_junit(junit_path, rows, f"dlprobe.check.{Path(options.script).stem}", report.get("duration_s"),
                        {"script": options.script, "run_dir": outcome.run_dir, "exit_code": code})  # fmt: skip
        except OSError as exc:
            problems.append(f"cannot write --junit {options.junit}: {exc.strerror or exc}")
    if options.update_baseline and config.baseline:
        if code == PASSED:
            save_baseline(config.baseline, report)
            if console is not None:
                console.print(f"Baseline written to {config.baseline}")
        elif console is not None:
            console.print(f"[yellow]Baseline {escape(str(config.baseline))} not updated: the check did not pass.[/]",
                          markup=True)  # fmt: skip
    if problems:
        raise DlprobeError("; ".join(problems), hint=f"the verdict is saved in {files.check}",
                           exit_code=USAGE)  # fmt: skip
    return CheckOutcome(code, outcome.run_dir, rows, report, stop)
