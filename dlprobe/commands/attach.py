"""`dlprobe attach PID`: the outside view of a training job that is already running."""

from __future__ import annotations

import typer

from dlprobe.commands.options import json_option, out_option


def attach(
    pid: int = typer.Argument(
        ..., help="A process of the running job: the training process, its launcher (torchrun, a shell) or a worker."
    ),
    duration: str = typer.Option(
        "30s", "--duration", "-d", help="How long to watch, e.g. 30s, 2m (Ctrl-C ends early)."
    ),
    json_path: str | None = json_option("Also write the report as JSON to this path."),
    out: str | None = out_option("Run directory (default ./dlprobe-runs/attach-NAME-PID-TIME)."),
) -> None:
    """Watch a running training job from outside for --duration and report on its DataLoader workers.

    Reads /proc of the job's process tree (memory by kind of page, CPU time, /dev/shm, the cgroup limit) and
    takes one non-blocking py-spy stack dump per process at the end. Sends the job no signal and never pauses it;
    Ctrl-C ends the watch and still writes the report. Batch wait times, the indices in flight and dataset
    suspects need the in-process hooks: the report names the `dlprobe run` command that gives them.
    """
    from rich.markup import escape

    from dlprobe.commands.outputs import write_outputs
    from dlprobe.console import err_console
    from dlprobe.errors import DlprobeError
    from dlprobe.supervisor.attach import AttachOptions
    from dlprobe.supervisor.attach import attach as attach_to
    from dlprobe.units import parse_duration

    try:
        seconds = parse_duration(duration if duration[-1:].isalpha() else duration + "s")
    except ValueError as exc:
        raise DlprobeError(f"--duration: {exc}", hint="e.g. --duration 30s or --duration 2m") from None
    if seconds <= 0:
        raise DlprobeError(f"--duration must be more than 0, not {duration}", hint="e.g. --duration 30s")

    console = err_console()
    # a note may quote the job's processes (their names are another user's text): printed, never read as markup
    run_dir = attach_to(
        AttachOptions(pid, seconds, out), lambda text: console.print(f"[dim]\\[dlprobe][/] {escape(text)}", markup=True)
    )
    write_outputs(run_dir, console, json_path)
