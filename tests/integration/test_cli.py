"""The command line as a user meets it: usage errors as one `error:` and one `hint:` line, help that reads whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from dlprobe.cli import app
from tests.conftest import run_dlprobe

HELP_COLUMNS = 80


def _commands() -> dict[str, object]:
    """Every command a user can ask --help of, by its words: {"run": ..., "cache clear": ...}."""
    found: dict[str, object] = {}

    def walk(words: list[str], command: object) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            found[" ".join([*words, name])] = sub
            walk([*words, name], sub)

    walk([], typer.main.get_command(app))
    return found


COMMANDS = _commands()


RUN_HINT = "dlprobe run [OPTIONS] SCRIPT [SCRIPT_ARGS]...; see dlprobe run --help"
USAGE_ERRORS = {
    "missing-argument": (["run"], "missing argument SCRIPT", RUN_HINT),
    "unknown-command": (["frob"], "no such command 'frob'", "dlprobe [OPTIONS] COMMAND [ARGS]...; see dlprobe --help"),
    "unknown-option": (["report", "--xyzzy", "x"], "no such option: --xyzzy",
                       "dlprobe report [OPTIONS] RUN_DIRS...; see dlprobe report --help"),
    "bad-value": (["run", "--hang-timeout", "soon", "train.py"],
                  "invalid value for '--hang-timeout': 'soon' is not a valid float", RUN_HINT),
    "option-without-value": (["check", "--max-seconds"], "option '--max-seconds' requires an argument",
                             "see dlprobe check --help"),
    "extra-argument": (["cache", "clear", "a", "b"], "got unexpected extra argument(s) (b)",
                       "dlprobe cache clear [OPTIONS] [KEY]; see dlprobe cache clear --help"),
}  # fmt: skip
# An unknown option before the script: the script's own options follow it, so dlprobe sees it where the script goes.
USAGE_ERRORS.update(
    {
        f"unknown-option-before-script-{command}": (
            [command, "--bogus", "train.py"],
            "no such option: --bogus",
            "dlprobe's own options go before the script; see the command's --help",
        )
        for command in ("run", "check", "scan", "tune")
    }
)


@pytest.mark.parametrize(("args", "error", "hint"), USAGE_ERRORS.values(), ids=USAGE_ERRORS.keys())
def test_a_usage_error_is_one_error_line_and_one_hint_line(tmp_path: Path, args: list[str], error: str, hint: str):
    proc = run_dlprobe(args, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {error}\nhint: {hint}\n"
    assert proc.stdout == ""


def _help(words: str, tmp_path: Path) -> str:
    proc = run_dlprobe([*words.split(), "--help"], tmp_path, env={"COLUMNS": str(HELP_COLUMNS)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _flat(text: str) -> str:
    """Text with the help's boxes taken out and every run of whitespace one space: a help sentence wrapped in its
    column reads whole, as the option's other columns are blank on its continuation lines."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_help_reads_whole_at_80_columns(tmp_path: Path, words: str):
    text = _help(words, tmp_path)
    lines = text.splitlines()
    assert "{" not in text, text  # typer's `{script}` for a required argument
    [usage_at] = [i for i, line in enumerate(lines) if line.strip().startswith("Usage: ")]
    usage = lines[usage_at].split(f"dlprobe {words}", 1)[1].split()
    command = COMMANDS[words]
    names = [p.name.upper() for p in command.params if p.param_type_name == "argument"]  # type: ignore[attr-defined]
    expected = ["COMMAND", "ARGS"] if hasattr(command, "commands") else names  # a group: `dlprobe cache`
    assert [w.strip("[].") for w in usage[1:]] == expected, lines[usage_at]
    # The description: each line of a paragraph is as full as wrapping allows (the next line's first word did not
    # fit on it), never ended where a line of the docstring happened to end.
    panels = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    description = lines[usage_at + 1 : panels]
    width = HELP_COLUMNS - 2  # rich pads the text by one column on each side
    for line, following in zip(description, description[1:], strict=False):
        if line.strip() and following.strip():
            assert len(line.strip()) + 1 + len(following.split()[0]) > width, f"{line!r} broken before {following!r}"
    for param in command.params:  # type: ignore[attr-defined]
        if param.help:
            assert _flat(param.help) in _flat(text), param.help
