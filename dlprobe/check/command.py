"""`dlprobe check`: run the script under the probe within its limits, evaluate the rules, write the verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from dlprobe.check.baseline import load_baseline, save_baseline
from dlprobe.check.config import CheckConfig, load_config
from dlprobe.check.limits import RunWatch, Stop
from dlprobe.check.rules import RuleResult, evaluate, failed, script_failed
from dlprobe.errors import DlprobeError
from dlprobe.rundir import EVENTS_FILE, read_jsonl, write_json
from dlprobe.target.run_limits import STOP_EVENT

CHECK_FILE = "check.json"
PASSED, FAILED, USAGE, SCRIPT_FAILED = 0, 1, 2, 3


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


@dataclass
class CheckOutcome:
    exit_code: int
    run_dir: Path
    rules: list[RuleResult]
    report: dict[str, Any]
    stop: Stop | None


def exit_code_for(rows: list[RuleResult], report: dict[str, Any], stop: Stop | None) -> int:
    """3 when the script itself failed (its exit code is still in the report), else 1 if any rule failed."""
    if script_failed(report, stop):
        return SCRIPT_FAILED
    return FAILED if failed(rows) else PASSED


def _stop_from_events(run_dir: Path) -> Stop | None:
    """The hooks' own stop, for a run that ended before the supervisor read the event."""
    for ev in read_jsonl(run_dir / EVENTS_FILE):
        if ev.get("ev") == STOP_EVENT:
            return Stop(str(ev.get("reason")), float(ev.get("t", 0.0)))
    return None


def _baseline_for(config: CheckConfig, update: bool) -> dict[str, Any] | None:
    if update and not config.baseline:
        raise DlprobeError(
            "--update-baseline needs a baseline file",
            hint='pass --baseline FILE, or set baseline = "FILE" in the config',
        )
    if config.baseline and not update:
        return load_baseline(config.baseline)
    return None


def run_check(options: CheckOptions, console: Console | None) -> CheckOutcome:
    """Everything `dlprobe check` does; bad configs and baselines fail before the script starts."""
    from dlprobe.outputs import write_outputs
    from dlprobe.render.check_table import check_summary
    from dlprobe.render.junit import write_junit
    from dlprobe.supervisor import RunOptions, check_script, run_script

    config = load_config(options.config_path, options.overrides)
    check_script(options.script)
    baseline = _baseline_for(config, options.update_baseline)
    junit_path = Path(options.junit) if options.junit else None
    if junit_path is not None and not junit_path.parent.is_dir():
        raise DlprobeError(f"cannot write --junit {options.junit}: no such directory {junit_path.parent}",
                           hint="create the directory first, or pass a path in an existing one")  # fmt: skip

    watch = RunWatch(config.max_batches, config.max_seconds, config.hang_timeout)
    run_options = RunOptions(options.script, options.args, options.out, live=not options.quiet, env=watch.env(),
                             on_tick=watch.on_tick)  # fmt: skip
    outcome = run_script(run_options)
    report = write_outputs(outcome.run_dir, None if options.quiet else console)
    stop = watch.stop or _stop_from_events(outcome.run_dir)
    rows = evaluate(config, report, stop, baseline, config.baseline or "")
    code = exit_code_for(rows, report, stop)

    write_json(
        outcome.run_dir / CHECK_FILE,
        {
            "exit_code": code,
            "passed": code == PASSED,
            "stop": stop.to_dict() if stop else None,
            "config": {key: config.raw[key] for key in config.raw},
            "config_sources": config.sources,
            "baseline": config.baseline if baseline is not None else None,
            "rules": [r.to_dict() for r in rows],
        },
    )
    if console is not None:
        console.print(check_summary(rows, code, str(outcome.run_dir)))
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
            console.print(f"[yellow]Baseline {config.baseline} not updated: the check did not pass.[/]")
    if problems:
        raise DlprobeError("; ".join(problems), hint=f"the verdict is saved in {outcome.run_dir / CHECK_FILE}",
                           exit_code=USAGE)  # fmt: skip
    return CheckOutcome(code, outcome.run_dir, rows, report, stop)
