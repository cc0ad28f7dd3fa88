"""Options several commands share, spelled once so their help reads the same everywhere."""

from __future__ import annotations

import inspect
from typing import Any

import typer
from typer.core import TyperCommand

from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import LAUNCH_COMMAND, LAUNCH_MODULE, LAUNCH_SCRIPT

# Options after the script belong to the script: `dlprobe run train.py --epochs 3`.
SCRIPT_COMMAND = {"allow_interspersed_args": False, "ignore_unknown_options": True}
SCRIPT_ARGS = typer.Argument(None, help="Arguments passed to the script as they are.")


def out_option(help_text: str = "Run directory (default ./dlprobe-runs/NAME-TIME).") -> Any:
    return typer.Option(None, "--out", "-o", help=help_text)


def json_option(help_text: str) -> Any:
    return typer.Option(None, "--json", help=help_text)


# click drops the `--` that ends dlprobe's own options, so a command line keeps whether one came before the target.
AFTER_DASHES = "dlprobe.after_dashes"
MODULE_HELP = "Run the module SCRIPT as python -m does (SCRIPT is then e.g. mypkg.train)."


def flowed(doc: str | None) -> str:
    """A docstring as help text: each paragraph on one line, so the help wraps it to the terminal's width instead
    of breaking where the source's lines happened to end ("the run / directories")."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


class DlprobeCommand(TyperCommand):
    """A command whose usage line names its arguments as its help does (SCRIPT [SCRIPT_ARGS]...), where typer
    would print `{script}` for a required one."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # typer._click.Context: a private module
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                continue
            name = (param.metavar or param.name or "").upper()
            name = name if param.required else f"[{name}]"
            pieces.append(name if param.nargs == 1 else f"{name}...")
        return pieces


class LaunchCommand(DlprobeCommand):
    """A command that runs a target: `SCRIPT ARGS`, `-m MODULE ARGS`, or `-- COMMAND ARGS` (any launcher)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer._click.Context: a private module
        ctx.meta[AFTER_DASHES] = _dashes_before_target(self, args)
        return super().parse_args(ctx, args)


def _dashes_before_target(command: TyperCommand, args: list[str]) -> bool:
    """Whether `--` is the first word that is neither one of the command's options nor an option's value."""
    takes_value: set[str] = set()
    for param in command.params:
        # typer vendors its own click: its options are known by their type name, not by class
        if (
            param.param_type_name == "option"
            and not getattr(param, "is_flag", False)
            and not getattr(param, "count", False)
        ):
            takes_value.update(param.opts)
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return True
        if not word.startswith("-") or word == "-":
            return False
        if word in takes_value:
            i += 1  # its value: `--out --` names a directory called "--", oddly but faithfully
        i += 1
    return False


def launch_kind(ctx: typer.Context, module: bool) -> str:
    """LAUNCH_SCRIPT, LAUNCH_MODULE (-m) or LAUNCH_COMMAND (after --)."""
    if ctx.meta.get(AFTER_DASHES):
        if module:
            raise DlprobeError(
                "-m and -- do not go together",
                hint="dlprobe run -m mypkg.train, or dlprobe run -- python -m mypkg.train",
            )
        return LAUNCH_COMMAND
    return LAUNCH_MODULE if module else LAUNCH_SCRIPT


def one_process_only(ctx: typer.Context, module: bool, command_name: str) -> str:
    """scan and tune take over one process's DataLoader: a script or a module, not a launcher's command."""
    kind = launch_kind(ctx, module)
    if kind == LAUNCH_COMMAND:
        raise DlprobeError(
            f"dlprobe {command_name} runs one process, not a command after --",
            hint=f"give the script or module a single rank would run, e.g. dlprobe {command_name} train.py "
            f"or dlprobe {command_name} -m mypkg.train",
        )
    return kind


PROM_TEXTFILE_HELP = (
    "Keep the live metrics (per-worker USS/PSS, /dev/shm, descriptors, batches, waits) in a file in this directory "
    "for node_exporter's textfile collector, refreshed twice a second and removed at the end (docs/fleet.md)."
)
PROM_LISTEN_HELP = (
    "Serve the live metrics at http://HOST:PORT/metrics for Prometheus, from the supervisor (127.0.0.1 unless a "
    "host is given; port 0: any free port, printed and in meta.json)."
)


def prom_textfile_option() -> Any:
    return typer.Option(None, "--prom-textfile", metavar="DIR", help=PROM_TEXTFILE_HELP)


def prom_listen_option() -> Any:
    return typer.Option(None, "--prom-listen", metavar="[HOST:]PORT", help=PROM_LISTEN_HELP)


LOG_TO_HELP = (
    "Also log the per-worker memory, /dev/shm and the loop's data wait into the script's own active W&B or MLflow "
    "run, at the script's own steps (wandb, mlflow; repeat or comma-separate). Never starts a run of its own; the "
    "report says when the script had none (docs/fleet.md)."
)


def log_to_option() -> Any:
    return typer.Option(None, "--log-to", metavar="wandb|mlflow", help=LOG_TO_HELP)
