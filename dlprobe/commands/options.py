"""Options several commands share, spelled once so their help reads the same everywhere."""

from __future__ import annotations

from typing import Any

import typer

# Options after the script belong to the script: `dlprobe run train.py --epochs 3`.
SCRIPT_COMMAND = {"allow_interspersed_args": False, "ignore_unknown_options": True}
SCRIPT_ARGS = typer.Argument(None, help="Arguments passed to the script as they are.")


def out_option(help_text: str = "Run directory (default ./dlprobe-runs/NAME-TIME).") -> Any:
    return typer.Option(None, "--out", "-o", help=help_text)


def json_option(help_text: str) -> Any:
    return typer.Option(None, "--json", help=help_text)
