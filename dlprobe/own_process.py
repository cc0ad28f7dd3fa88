"""How dlprobe starts a Python process of its own (the background plot): never from a path another user can write."""

from __future__ import annotations

import sys
from pathlib import Path

# The folder that holds the dlprobe package this process runs.
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def python_module_command(module: str, *args: str, safe_path_flag: bool | None = None) -> list[str]:
    """`python -m MODULE ARGS` with a sys.path no folder the user runs from can add to. `python -m` alone puts the
    current directory first, so a `dlprobe/` left in a shared folder would run as whoever runs dlprobe there.
    `-P` (python 3.11+) leaves it off; older pythons start through `-c`, whose first path entry (the current
    directory) is replaced by dlprobe's own folder before anything but the builtin `sys` is imported."""
    if safe_path_flag if safe_path_flag is not None else sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module, *args]
    code = (
        "import sys; sys.path[0] = sys.argv.pop(1); import runpy; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", code, PACKAGE_PARENT, *args]
