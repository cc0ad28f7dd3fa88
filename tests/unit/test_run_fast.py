"""`dlprobe run`'s own parser (commands/run_fast.py) reads every command line it accepts exactly as typer does, and
leaves every other one to typer."""

from __future__ import annotations

import pytest

from dlprobe.commands import run as run_command
from dlprobe.commands.run_fast import Ending, RunArgs, parse

ACCEPTED = [
    ["run", "train.py"],
    ["run", "-q", "train.py", "--epochs", "3"],
    ["run", "--out", "d", "--json", "r.json", "-q", "train.py", "-x", "--out", "y", "--help"],
    ["run", "-o", "d", "--hang-timeout", "2.5", "--on-hang", "stop", "train.py"],
    ["run", "-m", "pkg.mod", "a", "b"],
    ["run", "--hang-timeout", "5", "--hang-timeout", "7", "t.py"],
    ["run", "--quiet", "-m", "-q", "mod"],
    ["run", "--on-hang", "later", "t.py"],
    ["run", "--hang-timeout", "0", "t.py", ""],
    ["run", "--hang-timeout", "1e3", "t.py"],
    ["run", "--verbose", "t.py", "--verbose"],
    ["run", "-v", "-q", "-m", "mod"],
    ["run", "--prom-textfile", "/var/lib/node-exporter", "--prom-listen", "0.0.0.0:9400", "t.py"],
    ["run", "--prom-listen", "0", "-m", "mod", "--prom-listen", "1"],
    ["run", "--log-to", "wandb", "-q", "--log-to", "mlflow,wandb", "t.py", "--log-to", "x"],
]
DECLINED = [
    ["run"],
    ["run", "--help"],
    ["run", "--", "torchrun", "train.py"],
    ["run", "t.py", "--", "x"],
    ["run", "--out=d", "t.py"],
    ["run", "-qm", "mod"],
    ["run", "-vq", "t.py"],
    ["run", "--hang-timeout", "abc", "t.py"],
    ["run", "--hang-timeout", "-1", "t.py"],
    ["run", "--hang-timeout", "nan", "t.py"],
    ["run", "--bogus", "t.py"],
    ["run", "--out"],
    ["run", "-q"],
    ["run", ""],
    ["report", "d"],
    ["--version"],
    [],
]


def _typer_args(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> RunArgs:
    """What typer hands to the command body for this command line (the body itself replaced)."""
    from dlprobe.cli import app

    seen: list[RunArgs] = []
    monkeypatch.setattr(run_command, "execute", lambda args: seen.append(args) or Ending(0))
    assert app(argv, standalone_mode=False) == 0
    return seen[0]


@pytest.mark.parametrize("argv", ACCEPTED, ids=" ".join)
def test_a_command_line_it_accepts_reads_as_typer_reads_it(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fast = parse(argv)
    assert fast is not None
    assert fast == _typer_args(argv, monkeypatch)


@pytest.mark.parametrize("argv", DECLINED, ids=lambda argv: " ".join(argv) or "(none)")
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    assert parse(argv) is None
