"""What dlprobe keeps of the script's stderr without standing between the script and it.

The script inherits dlprobe's stdout and stderr: a terminal stays a terminal, a closed pipe reaches the script, and
nothing of the script's output depends on dlprobe staying alive. Where stderr is a regular file (a Slurm or CI log,
`2> train.log`), what the run wrote to it is read back once the target has exited, from the file's size at the start:
at most STDERR_KEPT_BYTES go to stderr.log: all of it, or where it wrote more, its first STDERR_HEAD_BYTES (the
first error), a line saying how much was left out, and its end (the page's tail, torchrun's summary). A terminal, a
pipe or a socket cannot be read back: nothing is kept, and result.json says why (`stderr`). The copy is redacted
(dlprobe/redact.py): a credential the script printed stays in its own log, never in the run directory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dlprobe import atomic
from dlprobe.redact import redact_text
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import STDERR_HEAD_BYTES, STDERR_KEPT_BYTES, StderrKept

_KINDS = ((stat.S_ISFIFO, "pipe"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "terminal"))


@dataclass(frozen=True)
class StderrOrigin:
    """Where fd 2 pointed when the target started, and the file's size then."""

    kind: str
    device: int = 0
    inode: int = 0
    size: int = 0


def stderr_origin(fd: int = 2) -> StderrOrigin:
    try:
        st = os.fstat(fd)
    except OSError:
        return StderrOrigin("closed")
    if stat.S_ISREG(st.st_mode):
        return StderrOrigin("file", st.st_dev, st.st_ino, st.st_size)
    for test, kind in _KINDS:
        if test(st.st_mode):
            # A character device is a terminal only if it says so (/dev/null is one too, and keeps nothing either).
            return StderrOrigin(kind if kind != "terminal" or os.isatty(fd) else "other")
    return StderrOrigin("other")


def keep_stderr(origin: StderrOrigin, run_dir: Path, fd: int = 2) -> StderrKept:
    """Copy the end of what the run wrote to a stderr file into stderr.log; say what was kept and why not."""
    if origin.kind != "file":
        return {"kind": origin.kind, "written_bytes": None, "kept_bytes": 0, "problem": None}
    try:
        # Our own fd 2, opened again for reading: the same file the script wrote to (checked by its inode), never a
        # path someone could swap meanwhile.
        source = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return _unread(f"cannot read it back: {exc.strerror or exc}")
    try:
        st = os.fstat(source)
        if (st.st_dev, st.st_ino) != (origin.device, origin.inode):
            return _unread("stderr is no longer the file it was at the start")
        written = max(0, st.st_size - origin.size)  # a file truncated meanwhile (log rotation) reads from 0
        first = origin.size if st.st_size >= origin.size else 0
        if st.st_size - first <= STDERR_KEPT_BYTES:
            data = os.pread(source, st.st_size - first, first)
        else:  # its head and its tail, the size of the copy bounded whatever the run wrote
            head = os.pread(source, STDERR_HEAD_BYTES, first)
            tail_bytes = STDERR_KEPT_BYTES - STDERR_HEAD_BYTES - 100
            left_out = st.st_size - first - len(head) - tail_bytes
            marker = f"\n[dlprobe: {left_out:,} bytes of stderr left out here]\n".encode()
            data = head + marker + os.pread(source, tail_bytes, st.st_size - tail_bytes)
    except OSError as exc:
        return _unread(f"cannot read it back: {exc.strerror or exc}")
    finally:
        os.close(source)
    # Bytes that are not UTF-8 come back as they were (surrogateescape); once per run, about 1 MiB at most.
    data = redact_text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    # A temporary file of its own, then renamed over the name: a link planted there is replaced, never written through.
    atomic.write_bytes_atomic(RunDir(run_dir).stderr, data)
    return {"kind": "file", "written_bytes": written, "kept_bytes": len(data), "problem": None}


def _unread(problem: str) -> StderrKept:
    return {"kind": "file", "written_bytes": None, "kept_bytes": 0, "problem": problem}
