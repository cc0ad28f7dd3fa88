"""`dlprobe run`: run a script under the probe, then write and print its report."""

from __future__ import annotations

import typer

from dlprobe.commands.options import (
    MODULE_HELP,
    SCRIPT_ARGS,
    json_option,
    launch_kind,
    log_to_option,
    out_option,
    prom_listen_option,
    prom_textfile_option,
)
from dlprobe.commands.run_fast import RunArgs, execute, exit_now
from dlprobe.supervisor.hang import DEFAULT_HANG_TIMEOUT_S, ON_HANG_CHOICES


def run(
    ctx: typer.Context,
    script: str = typer.Argument(
        ..., help="The training script, run unmodified; with -m a module; after -- any command (torchrun ...)."
    ),
    script_args: list[str] | None = SCRIPT_ARGS,
    module: bool = typer.Option(False, "-m", help=MODULE_HELP),
    out: str | None = out_option(),
    json_path: str | None = json_option("Also write the report as JSON to this path."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view and no summary; just the run directory."),
    hang_timeout: float = typer.Option(
        DEFAULT_HANG_TIMEOUT_S,
        "--hang-timeout",
        help="Seconds without a batch before stacks are dumped as a hang; 0 turns it off.",
    ),
    on_hang: str = typer.Option(
        ON_HANG_CHOICES[0], "--on-hang", help="After a hang is recorded: wait (keep waiting) or stop."
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Every finding's detail and evidence in the summary, not only its key numbers."
    ),
    start_method: str | None = typer.Option(
        None,
        "--start-method",
        help="Start every DataLoader's workers with this method (fork, forkserver, spawn, or thread where torch has "
        "thread workers), overriding the script's own choice; compare two runs with `dlprobe compare`.",
    ),
    no_isolated_checks: bool = typer.Option(
        False,
        "--no-isolated-checks",
        help="Fork no copy of the training for dlprobe's own checks: no failing sample loaded again, no "
        "start-method readiness check (docs/security.md).",
    ),
    prom_textfile: str | None = prom_textfile_option(),
    prom_listen: str | None = prom_listen_option(),
    log_to: list[str] | None = log_to_option(),
) -> None:
    """Run SCRIPT under the probe and report on every DataLoader it creates.

    `dlprobe run train.py ARGS`, `dlprobe run -m mypkg.train ARGS`, or any launcher after `--`:
    `dlprobe run -- torchrun --nproc-per-node 2 train.py`. Every Python process of the command that builds a
    DataLoader is probed (each rank of a job). dlprobe's own output goes to stderr; the target's stdout, stderr
    and exit code come through unchanged.
    """
    args = RunArgs(script, list(script_args or []), module, out, json_path, quiet, hang_timeout, on_hang)
    args.verbose = verbose
    args.start_method = start_method
    args.no_isolated_checks = no_isolated_checks
    args.prom_textfile = prom_textfile
    args.prom_listen = prom_listen
    args.log_to = list(log_to or [])
    args.launch = launch_kind(ctx, module)
    ending = execute(args)
    if ending.signal is not None:
        exit_now(ending)  # dies of the signal that killed the script, as python's caller would see it end
    raise typer.Exit(ending.code)
