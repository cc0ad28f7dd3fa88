"""Which py-spy binary the probe runs: the one lookup shared by the stall dumps and the hotspot sampler."""

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
