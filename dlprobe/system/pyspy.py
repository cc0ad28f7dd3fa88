"""Which py-spy binary the probe runs: the one lookup shared by the stall dumps and the hotspot sampler."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

PY_SPY_ENV = "DLPROBE_PY_SPY"  # path of the py-spy binary to use; a path that does not exist disables py-spy


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
