"""The typer command for `dlprobe check`; every option overrides the config key of the same name."""

from __future__ import annotations

from typing import Any

import typer


def check(
    script: str = typer.Argument(..., help="The training script, run unmodified."),
    script_args: list[str] | None = typer.Argument(None, help="Arguments passed to the script as they are."),
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
    out: str | None = typer.Option(None, "--out", "-o", help="Run directory (default ./dlprobe-runs/NAME-TIME)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view and no run summary; only the verdict."),
) -> None:
    """Run SCRIPT under the probe within limits and gate it on rules: exit 0 pass, 1 fail, 2 bad usage, 3 the
    script itself failed.

    Rules come from --config, else the tool.dlprobe table of the nearest pyproject.toml; options given here
    override them.
    """
    from dlprobe.check.command import CheckOptions, run_check
    from dlprobe.cli import err_console

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
    outcome = run_check(options, err_console())
    raise typer.Exit(outcome.exit_code)
