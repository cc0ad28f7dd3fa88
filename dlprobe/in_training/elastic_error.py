"""The DataLoader cause of a torchrun rank's end, in the error file torchelastic's agent reads
(TORCHELASTIC_ERROR_FILE).

The agent reads each failed rank's file once that rank has exited, takes the failure with the earliest timestamp as
the "Root Cause (first observed failure)" and prints its `extraInfo.py_callstack` (torch's ErrorHandler shape:
{"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": "<int seconds>"}}}). Without a file it
prints only the exit code. So the rank writes it itself, from its excepthook, as the exception that ends it is
recorded: the last moment it runs, and before the agent can read.

A script's own `@record` wrote the file already by then (it catches the exception inside `main()`, before the hook):
where what it wrote is torch's own "DataLoader worker (pid N) is killed by signal" (the same death), dlprobe's
cause is put before it and its traceback and timestamp are kept; any other error of the script's is more specific
than dlprobe's and is left as it is. A failure here is a probe problem, never the rank's exit status."""

from __future__ import annotations

import json
import os
import time
import traceback
from typing import TYPE_CHECKING, Any, cast

from dlprobe import atomic
from dlprobe.in_training import probe_errors
from dlprobe.redact import redact_text
from dlprobe.rundir import elastic_file
from dlprobe.rundir.elastic_file import ERROR_FILE_ENV
from dlprobe.rundir.schema import RUN_DIR_ENV
from dlprobe.torch_text import WORKER_DIED

if TYPE_CHECKING:  # imported where a rank dies: its dataclass pulls inspect into every script's start
    from dlprobe.in_training import death_cause

_written_pid: int | None = None  # the process that wrote its file (the hook and the atexit fallback both call)


def remember_baseline() -> None:
    """In a rank with an error file, what a later OOM kill is told against (death_cause.remember_baseline)."""
    if os.environ.get(ERROR_FILE_ENV):
        try:
            from dlprobe.in_training import death_cause

            death_cause.remember_baseline()
        except Exception as exc:
            probe_errors.record("elastic_error.baseline", exc, "an OOM kill in this cgroup may read as unexplained")


def _cause_lines(death: death_cause.WorkerDeath) -> list[str]:
    lines = [f"dlprobe: {death.verdict()}."]
    if death.seen.get("kernel_log"):
        lines.append(f"  kernel log: {death.seen['kernel_log']}")
    if death.seen.get("cgroup_oom_kills"):
        lines.append(f"  memory cgroup: {death.seen['cgroup_oom_kills']} OOM kill(s) since the rank started")
    lines.append(f"  torch said: {death.torch_message}")
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        lines.append(f"  each worker's memory and the finding: dlprobe report {run_dir}")
    return lines


def _extra(death: death_cause.WorkerDeath) -> dict[str, Any]:
    return {**death.evidence(), "verdict": death.verdict(), "run_dir": os.environ.get(RUN_DIR_ENV)}


_DEATH = WORKER_DIED


def merged(existing: Any, exc: BaseException, death: death_cause.WorkerDeath, now: float) -> dict[str, Any] | None:
    """The error file to write, given what is there (None: nothing); None to leave the file as it is."""
    cause = "\n".join(_cause_lines(death))
    if existing is None:
        text = redact_text("".join(traceback.format_exception(exc)))
        summary = f"dlprobe: {death.verdict()}. {type(exc).__name__}: {redact_text(str(exc))}"
        return elastic_file.new_record(summary, f"{cause}\n\n{text}", now, _extra(death))
    # @record's file of the same death (torch's words for it) is enriched; another error of the script's is not
    return cast("dict[str, Any] | None", elastic_file.enriched(existing, cause, death.verdict(), _extra(death), _DEATH))


def _read(path: str) -> Any:
    try:
        text = atomic.read_text(path)
    except FileNotFoundError:
        return None
    return json.loads(text)


def write_cause(exc: BaseException) -> None:
    """If `exc` ends this torchrun rank because a DataLoader worker died, put the cause where the agent reads it."""
    global _written_pid
    path = os.environ.get(ERROR_FILE_ENV)
    if not path or _written_pid == os.getpid():
        return
    try:
        from dlprobe.in_training import death_cause

        death = death_cause.from_exception(exc)
        if death is None:
            return
        try:
            existing = _read(path)
        except ValueError:
            return  # not JSON: whoever wrote it, the agent reads it as it is
        data = merged(existing, exc, death, time.time())
        if data is not None:
            atomic.write_text_atomic(path, json.dumps(data), encoding="utf-8")
        _written_pid = os.getpid()
    except Exception as probe_exc:
        probe_errors.record(
            "elastic_error.write", probe_exc, "torchrun's failure summary names no DataLoader cause for this rank"
        )
