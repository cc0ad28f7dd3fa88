"""Whose code a stack frame is: the one predicate for the user's own code (a leaf module: both sides import it)."""

from __future__ import annotations

import os
import re
import sysconfig
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type only: the training process's start imports this module
    import traceback

# Paths that are never the user's, on this machine or in a log from another one.
LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "<string>")
PROBE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")  # dlprobe itself


def _interpreter_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.join(p, "") for p in found if p)


_NOT_USER = (*_interpreter_prefixes(), PROBE_DIR)


def is_probe_file(filename: str | None) -> bool:
    """A frame of dlprobe itself or of runpy (which runs the script): dropped from what the user is shown."""
    if not filename:
        return False
    return filename.startswith(PROBE_DIR) or filename == "<frozen runpy>" or filename.endswith("/runpy.py")


_REMEDY_FILE = re.compile(r"(^|/)dlprobe/fixes/\w+\.py$")  # by path, so frames recorded on another machine match


def is_remedy_file(filename: str | None) -> bool:
    """A frame of dlprobe.fixes: a remedy the user's script calls, part of its own work (not the probe's)."""
    return bool(filename and _REMEDY_FILE.search(filename))


def is_user_file(filename: str | None) -> bool:
    """The user's own code: a .py file outside the standard library, installed packages and dlprobe."""
    if not filename or filename.startswith("<") or not filename.endswith(".py"):
        return False
    if any(marker in filename for marker in LIBRARY_MARKERS):
        return False
    return not os.path.abspath(filename).startswith(_NOT_USER)


def innermost_user_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """Where the user can act on an exception: the innermost frame of their own code (a raise inside the standard
    library, torch or another package is not where they fix it), else the innermost frame; None without frames.
    `frames` outermost first, as traceback.extract_tb gives them."""
    return next((f for f in reversed(frames) if is_user_file(f.filename)), frames[-1] if frames else None)
