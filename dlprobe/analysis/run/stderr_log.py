"""What the analysis takes from the script's stderr, read once at load time (`model.load_failure_records`): the tail
of stderr.log for the page, and torchrun's ChildFailedError summary for `rank-failed` (from the launcher's own
`launcher_failure` event, else stderr.log). stderr.log exists only where the script's stderr was a file dlprobe
could read back (supervisor/stderr_copy.py); `stderr_not_kept` says why else. No finding reads the file itself."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from dlprobe import atomic
from dlprobe.rundir.files import ReadProblems
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import STDERR_FILE, StderrKept

STDERR_TAIL_BYTES = 6000
# torchrun prints its failure summary last, about 400 bytes a failed rank: the end of a long log holds it, and a
# training log of gigabytes is not read whole for it.
LAUNCHER_SUMMARY_BYTES = 1 << 20


def _read_tail(run_dir: Path, limit: int, problems: ReadProblems | None = None) -> tuple[str, bool] | None:
    """The last `limit` bytes of stderr.log as text, and whether the file was longer; None without the file (a file
    there that could not be read, a link above all, is named in `problems`)."""
    try:
        with atomic.open_read(RunDir(run_dir).stderr) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if problems is not None:
            problems.add(STDERR_FILE, f"unreadable ({exc.strerror or exc})")
        return None
    return data.decode("utf-8", errors="replace"), size > limit


def stderr_tail(run_dir: Path, problems: ReadProblems | None = None) -> str | None:
    """The last STDERR_TAIL_BYTES of stderr.log (from a line start when cut), or None without one."""
    read = _read_tail(run_dir, STDERR_TAIL_BYTES, problems)
    if read is None:
        return None
    text, cut = read
    if cut:
        text = "..." + text.split("\n", 1)[-1]
    return text


def read_launcher_failures(run_dir: Path, summary: str | None = None) -> list[dict[str, Any]]:
    """torchrun's summary: the one the launcher recorded as it ended (`summary`), else the one in stderr.log; none
    without either (in-process runs have no launcher summary)."""
    if summary:
        return launcher_failures(summary)
    read = _read_tail(run_dir, LAUNCHER_SUMMARY_BYTES)
    return launcher_failures(read[0]) if read is not None else []


_WHERE = {
    "terminal": "a terminal",
    "pipe": "a pipe",
    "socket": "a socket",
    "closed": "closed",
    "other": "neither a file nor a terminal",
}


def stderr_not_kept(kept: StderrKept | None) -> str | None:
    """Why the run directory holds none of the script's stderr (None where stderr.log has it, or for a run directory
    from before dlprobe stopped copying the output, whose stderr.log is its whole stderr)."""
    if not kept or kept.get("kept_bytes"):
        return None
    kind = kept.get("kind") or "other"
    if kind == "file":
        problem = kept.get("problem")
        if problem:
            return (
                f"The script's stderr was a file that dlprobe could not read back ({problem}): nothing of it is kept."
            )
        return "The script wrote nothing to stderr during the run."
    return (
        f"The script's stderr was {_WHERE.get(kind, kind)}, which dlprobe leaves to the script and does not copy: its "
        "output is where it was printed. The run keeps it only when stderr is a file (2> train.log, a Slurm or CI "
        "log)."
    )


_FAILURE = re.compile(
    r"^\s*host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:\s*(?P<rank>-?\d+) \(local_rank: (?P<local>-?\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)[ \t]*(?:\((?P<signal>\w+)\))?[ \t]*\n"
    r"\s*error_file\s*:\s*(?P<file>.*)$",
    re.MULTILINE,
)


def launcher_failures(stderr: str) -> list[dict[str, Any]]:
    """torchrun's ChildFailedError summary: each failed rank's host, rank, local rank, exit code, pid, signal;
    the first is the root cause."""
    if "FAILED" not in stderr:
        return []
    block = stderr[stderr.rfind("Root Cause (first observed failure):") :] if "Root Cause" in stderr else ""
    failures = []
    for match in _FAILURE.finditer(stderr):
        failures.append(
            {
                "rank": int(match["rank"]),
                "local_rank": int(match["local"]),
                "host": match["host"],
                "exit_code": int(match["code"]),
                "pid": int(match["pid"]),
                "signal": match["signal"],
                "error_file": match["file"].strip(),
                "root_cause": bool(block) and match.group(0) in block,
            }
        )
    return failures
