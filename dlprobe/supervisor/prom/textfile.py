"""`--prom-textfile DIR`: the exposition as a file in node_exporter's textfile-collector directory, replaced whole
at each refresh (a temporary beside it, then a rename: node_exporter never reads half a file, and reads only
`*.prom`, so the temporary is not collected) and removed when the run ends."""

from __future__ import annotations

import os
import re
from pathlib import Path

from dlprobe import atomic
from dlprobe.errors import DlprobeError

HINT = (
    "give node_exporter's --collector.textfile.directory (e.g. /var/lib/prometheus/node-exporter), as a user who "
    "may write there"
)


def check_dir(value: str) -> Path:
    """The directory `--prom-textfile` names, if dlprobe can write its file there; else one error line, exit 2."""
    path = Path(value)
    if not path.exists():
        raise DlprobeError(f"--prom-textfile {value}: no such directory", hint=HINT)
    if not path.is_dir():
        raise DlprobeError(f"--prom-textfile {value}: not a directory", hint=HINT)
    if not os.access(path, os.W_OK | os.X_OK):
        raise DlprobeError(f"--prom-textfile {value}: the directory is not writable by this user", hint=HINT)
    return path


def file_name(job: str, pid: int) -> str:
    """`dlprobe_<job>_<pid>.prom`: one file per supervisor, so the runs sharing a node (and a directory) never
    overwrite each other's; the job's name kept to characters every collector and shell takes as they are."""
    return f"dlprobe_{re.sub(r'[^A-Za-z0-9_.-]', '_', job)[:100]}_{pid}.prom"


class Textfile:
    def __init__(self, directory: Path, job: str, pid: int) -> None:
        self.path = directory / file_name(job, pid)
        self.written = False

    def write(self, text: str) -> None:
        # atomic: created O_EXCL|O_NOFOLLOW, renamed over the old file (a link planted at the name is replaced,
        # never written through)
        atomic.write_bytes_atomic(self.path, text.encode())
        self.written = True

    def remove(self) -> None:
        """The file goes with the run: a stale file would show a finished run's workers as live. unlink removes a
        link itself, never its target."""
        if not self.written:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:  # noqa: S110 - someone removed it already: the end state is the same
            pass
        self.written = False
