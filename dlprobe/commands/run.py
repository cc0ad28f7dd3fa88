"""`dlprobe run`: run a script under the probe, then write and print its report."""

from __future__ import annotations

import typer

from dlprobe.commands.options import MODULE_HELP, SCRIPT_ARGS, json_option, launch_kind, out_option


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
        60.0, "--hang-timeout", help="Seconds without a batch before stacks are dumped as a hang; 0 turns it off."
    ),
    on_hang: str = typer.Option("wait", "--on-hang", help="After a hang is recorded: wait (keep waiting) or stop."),
) -> None:
    """Run SCRIPT under the probe and report on every DataLoader it creates.

    `dlprobe run train.py ARGS`, `dlprobe run -m mypkg.train ARGS`, or any launcher after `--`:
    `dlprobe run -- torchrun --nproc-per-node 2 train.py`. Every Python process of the command that builds a
    DataLoader is probed (each rank of a job). dlprobe's own output goes to stderr; the target's stdout, stderr
    and exit code come through unchanged.
    """
    from dlprobe.supervisor.run_target import RunOptions, run_script

    options = RunOptions(
        script,
        list(script_args or []),
        out,
        not quiet,
        hang_timeout=hang_timeout,
        on_hang=on_hang,
        launch=launch_kind(ctx, module),
        preload=("dlprobe.commands.outputs",),
    )
    outcome = run_script(options)
    # Imported once the script has started (run_script preloads them meanwhile), never on the way to starting it.
    from dlprobe.commands.outputs import write_outputs
    from dlprobe.console import err_console, print_error
    from dlprobe.errors import DlprobeError

    try:
        write_outputs(outcome.run_dir, None if quiet else err_console(), json_path, plot_in_background=True)
    except DlprobeError as exc:  # the script ran: its exit code is still the one to return, not dlprobe's 2
        print_error(exc.message, exc.hint)
    raise typer.Exit(outcome.exit_code)
