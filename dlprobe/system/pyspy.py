"""Which py-spy binary the probe runs and what its errors say, shared by the stall dumps and the hotspot sampler."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

PY_SPY_ENV = "DLPROBE_PY_SPY"  # path of the py-spy binary to use; a path that does not exist disables py-spy

# py-spy's words when the kernel refuses it ptrace access; shared by the stall dumps and the hotspot finding.
PERMISSION_ERROR = re.compile(r"permission denied|operation not permitted|ptrace", re.IGNORECASE)
PERMISSION_ADVICE = (
    "py-spy needs ptrace permission to read another process's stacks: run as the same user with "
    "`sysctl kernel.yama.ptrace_scope=0` (or as root), and in Docker add `--cap-add SYS_PTRACE` "
    "(Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])."
)

# /proc/PID/stat's state of a stopped process: T (SIGSTOP, or SIGTSTP from Ctrl-Z), t (a debugger's tracing stop).
# py-spy cannot pause it to read its stacks and fails with words that name ptrace ("unexpected waitpid result
# PtraceEvent"), which PERMISSION_ERROR would read as a refusal: the state is read first, and said instead.
STOPPED_STATES = ("T", "t")


def stopped_note(pid: int, state: str) -> str:
    """Why a stopped process has no stacks, and what lets them be read."""
    return (
        f"process {pid} is stopped (state {state}: SIGSTOP, Ctrl-Z or a debugger); its stacks cannot be read until "
        f"it continues (kill -CONT {pid})"
    )


# py-spy's words when the process it was pointed at was gone (or no longer Python) before it attached.
NO_PYTHON_PROCESSES = re.compile(r"No python processes found in process \d+")
# What follows py-spy's message when RUST_BACKTRACE is set: "Stack backtrace:" and numbered frames ("   7: main",
# "             at src/main.rs:12:5"); never the message.
_BACKTRACE_LINE = re.compile(r"^(?:Stack backtrace:|\s*\d+: |\s+at \S)")


def error_line(stderr: str) -> str | None:
    """py-spy's error message from its stderr: the "Error: ..." line, else the first line that is not part of a
    Rust backtrace; None when it printed nothing."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not _BACKTRACE_LINE.match(line)]
    for line in lines:
        if line.startswith("Error: "):
            return line[len("Error: ") :]
    return lines[0][:500] if lines else None


def find_py_spy() -> str | None:
    """$DLPROBE_PY_SPY if set (a path that is not an executable disables py-spy), else the py-spy beside this
    interpreter, else the one on PATH."""
    override = os.environ.get(PY_SPY_ENV)
    if override is not None:
        return override if override and os.access(override, os.X_OK) else None
    # The virtual environment's bin/ first: it is often not on PATH, and its py-spy is the one installed with dlprobe.
    beside = Path(sys.executable).parent / "py-spy"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")
