"""`dlprobe run`: run a script under the probe, then write and print its report."""

from __future__ import annotations

import typer

from dlprobe.commands.options import SCRIPT_ARGS, json_option, out_option


def run(
    script: str = typer.Argument(..., help="The training script, run unmodified."),
    script_args: list[str] | None = SCRIPT_ARGS,
    out: str | None = out_option(),
    json_path: str | None = json_option("Also write the report as JSON to this path."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view and no summary; just the run directory."),
    hang_timeout: float = typer.Option(
        60.0, "--hang-timeout", help="Seconds without a batch before stacks are dumped as a hang; 0 turns it off."
    ),
    on_hang: str = typer.Option("wait", "--on-hang", help="After a hang is recorded: wait (keep waiting) or stop."),
) -> None:
    """Run SCRIPT under the probe and report on every DataLoader it creates.

    dlprobe's own output goes to stderr; the script's stdout, stderr and exit code come through unchanged.
    """
    from dlprobe.console import err_console
    from dlprobe.render.run_outputs import write_outputs
    from dlprobe.supervisor.run_target import RunOptions, run_script

    options = RunOptions(script, list(script_args or []), out, not quiet, hang_timeout=hang_timeout, on_hang=on_hang)
    outcome = run_script(options)
    write_outputs(outcome.run_dir, None if quiet else err_console(), json_path, plot_in_background=True)
    raise typer.Exit(outcome.exit_code)
