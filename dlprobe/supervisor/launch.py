"""How `dlprobe run` starts its target: a script or a module exactly as python starts it, or any command as given,
with the hooks injected into every Python process of it through PYTHONPATH (a sitecustomize)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from importlib.machinery import PathFinder
from pathlib import Path

import dlprobe
from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import LAUNCH_COMMAND, LAUNCH_MODULE, LAUNCH_SCRIPT, PACKAGE_PATH_ENV, TARGET_ENV

PACKAGE_DIR = Path(dlprobe.__file__).resolve().parent
# The folder holding the injected sitecustomize (dlprobe/in_training/injected); found by path, because the
# supervisor never imports the training side.
INJECTED_DIR = PACKAGE_DIR / "in_training" / "injected"
# Linux refuses a single environment string longer than this (MAX_ARG_STRLEN, 32 pages) with E2BIG.
MAX_ENV_STRING = 32 * 4096
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_NODE_RANK_FLAGS = ("--node-rank", "--node_rank")


def check_module(module: str) -> None:
    """A dotted name whose top-level package exists where the target's python will look (the current directory
    first, as python -m does). Only the top level: finding `pkg.mod` would import `pkg`, and with it maybe torch."""
    if not _MODULE_NAME.match(module):
        raise DlprobeError(
            f"{module!r} is not a module name", hint="give a dotted module name as for python -m, e.g. -m mypkg.train"
        )
    top = module.split(".", 1)[0]
    if top in sys.builtin_module_names or top in sys.modules:
        return
    if PathFinder.find_spec(top, [os.getcwd(), *sys.path[1:]]) is None:
        raise DlprobeError(
            f"no module named {top}",
            hint="run from the directory that holds the package, or install it; -m takes a module as python -m does",
        )


def check_command(command: list[str]) -> None:
    """The command's executable must exist, as a missing script must (one error line, exit 2)."""
    if not command or not command[0]:
        raise DlprobeError("no command given after --", hint="e.g. dlprobe run -- torchrun --nproc-per-node 2 train.py")
    exe = command[0]
    # A path is taken as it is; a bare name is looked up on PATH as the shell (and Popen) would.
    found = os.path.isfile(exe) and os.access(exe, os.X_OK) if os.sep in exe else shutil.which(exe) is not None
    if not found:
        raise DlprobeError(
            f"command not found: {exe}",
            hint="check the spelling and PATH; a script needs its interpreter, e.g. -- bash train.sh",
        )


def target_command(launch: str, script: str, args: list[str]) -> list[str]:
    """The command line that starts the target: plain python's, so the script's `__file__`, `sys.argv`, `sys.path`,
    stack and exit status are what they are without dlprobe (the hooks come in through `inject`)."""
    if launch == LAUNCH_COMMAND:
        return [script, *args]
    if launch == LAUNCH_MODULE:
        return [sys.executable, "-m", script, *args]
    return [sys.executable, script, *args]


def inject(env: dict[str, str], launch: str, name: str) -> None:
    """Put the injected sitecustomize first on the target's PYTHONPATH, the user's own path after it, and name the
    target: the Python process this one starts (its parent's pid is ours) installs the hooks before its first line.

    In every launch mode: Lightning's DDP re-launches `python train.py` for ranks 1..N-1, torchrun starts its
    ranks itself, and those processes are probed at their first DataLoader.
    """
    own = os.environ.get("PYTHONPATH")
    paths = [str(INJECTED_DIR)] + ([own] if own else [])
    value = os.pathsep.join(paths)
    if len(value) >= MAX_ENV_STRING:
        raise DlprobeError(
            f"PYTHONPATH is too long to add dlprobe's hook to it ({len(own or ''):,} characters)",
            hint="shorten PYTHONPATH (Linux allows one environment variable at most 128 KiB)",
        )
    env["PYTHONPATH"] = value
    env[PACKAGE_PATH_ENV] = str(PACKAGE_DIR.parent)
    env[TARGET_ENV] = f"{os.getpid()}:{launch}:{name}"


def node_rank(command: list[str]) -> int | None:
    """This node's rank in a several-node job, from a torchrun command line's --node-rank (else None)."""
    for i, word in enumerate(command):
        for flag in _NODE_RANK_FLAGS:
            value = None
            if word == flag and i + 1 < len(command):
                value = command[i + 1]
            elif word.startswith(flag + "="):
                value = word.split("=", 1)[1]
            if value is not None and value.strip().isdigit():
                return int(value)
    return None


def run_name(launch: str, script: str, args: list[str]) -> str:
    """What names the run directory: the script, the module, or the first .py (else the program) of a command."""
    if launch == LAUNCH_MODULE:
        return script.rsplit(".", 1)[-1]
    if launch == LAUNCH_COMMAND:
        for word in args:
            if word.endswith(".py"):
                return Path(word).stem
        return Path(script).name
    return Path(script).stem


LAUNCHES = (LAUNCH_SCRIPT, LAUNCH_MODULE, LAUNCH_COMMAND)
