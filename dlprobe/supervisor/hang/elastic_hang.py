"""A hang under torchrun, in torchrun's own summary: before `--on-hang stop` ends the job, the stalled rank's
TORCHELASTIC_ERROR_FILE gets the hang's cause, and the rank is stopped first so that torchelastic's agent sees it
fail, reads the file and prints it as the root cause.

Stopping torchrun itself (what `--on-hang stop` does to any other command) makes its agent raise SignalException
and print no summary at all. A rank blocked in next() cannot write its own file: the supervisor writes it, from the
hang record it has just saved (the stalled rank, the worker it waits for, that worker's index and frame)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlprobe import atomic
from dlprobe.frames import is_user_file
from dlprobe.rundir import elastic_file
from dlprobe.rundir.schema import HangRecord
from dlprobe.supervisor.problems import Problems

RANK_STOP_S = 20.0  # torchrun stops the other ranks (SIGTERM, then SIGKILL after its own 30 s) and prints its summary


def error_file_of(pid: int) -> str | None:
    """The rank's TORCHELASTIC_ERROR_FILE, as the agent set it in the rank's environment."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{elastic_file.ERROR_FILE_ENV}=".encode()
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace") or None
    return None


def _awaited(record: HangRecord) -> dict[str, Any]:
    """The worker process the stalled rank waits for (its loop names the worker id), or {}."""
    loop = record.get("loop") or {}
    for proc in record.get("processes") or []:
        if (
            proc.get("role") == "worker"
            and proc.get("main_pid") == record.get("main_pid")
            and proc.get("worker_id") == loop.get("awaited_worker")
            and proc.get("loader_id") == loop.get("loader_id")
        ):
            return proc
    return {}


def _user_frame(proc: dict[str, Any]) -> str | None:
    """The innermost frame of the user's code in the worker's stack (py-spy's or faulthandler's), or None."""
    for thread in proc.get("stack") or []:
        for frame in thread.get("frames") or []:  # innermost first, as py-spy gives them
            filename = frame.get("filename") or frame.get("file")
            if is_user_file(filename):
                return f"{frame.get('name')} ({str(filename).rsplit('/', 1)[-1]}:{frame.get('line')})"
    return None


def verdict(record: HangRecord) -> tuple[str, dict[str, Any]]:
    """One line and dlprobe's evidence for the file."""
    loop = record.get("loop") or {}
    worker = _awaited(record)
    inflight = worker.get("inflight") or {}
    index = inflight.get("index")
    frame = _user_frame(worker)
    who = f"DataLoader worker {loop.get('awaited_worker')}" if loop.get("awaited_worker") is not None else "A loader"
    pid = f" (pid {worker['pid']})" if worker.get("pid") else ""
    loader = f" of loader {loop.get('loader_id')}" if loop.get("loader_id") is not None else ""
    on = f" on index {index}" if index is not None else ""
    at = f" in {frame}" if frame else ""
    line = (
        f"{who}{pid}{loader} hung{on}{at}: no batch for {float(record.get('waited_s') or 0):.0f} s; dlprobe "
        "stopped the rank (--on-hang stop)"
    )
    evidence = {"cause": "hang", "pid": worker.get("pid"), "worker_id": loop.get("awaited_worker"),
                "loader": loop.get("loader_id"), "index": index, "frame": frame, "waited_s": record.get("waited_s"),
                "verdict": line}  # fmt: skip
    return line, evidence


def write_cause(record: HangRecord, path: str, run_dir: Path, now: float) -> None:
    line, evidence = verdict(record)
    evidence["run_dir"] = str(run_dir)
    cause = f"dlprobe: {line}.\n  the stacks of every process: {run_dir}/hangs; dlprobe report {run_dir}"
    try:
        existing: Any = json.loads(atomic.read_text(path))
    except FileNotFoundError:
        existing = None
    if existing is None:
        data = elastic_file.new_record(f"dlprobe: {line}", cause, now, evidence)
    else:  # the rank wrote one already (an error it caught, then hung): the cause goes in front
        data = elastic_file.enriched(existing, cause, line, evidence, None)
        if data is None:
            return
    atomic.write_text_atomic(path, json.dumps(data), encoding="utf-8")


def stop_stalled_rank(
    record: HangRecord, run_dir: Path, launcher_pid: int, wait_main: Callable[[float], bool], problems: Problems
) -> bool:
    """Under torchrun (the stalled process a rank with an error file, not the launcher): write the cause, stop the
    rank, and let the launcher end the job and print its summary. True when the launcher exited by itself."""
    rank = record.get("main_pid")
    if not isinstance(rank, int) or rank == launcher_pid:
        return False
    path = error_file_of(rank)
    if path is None:
        return False
    try:
        write_cause(record, path, run_dir, time.time())
    except Exception as exc:  # never the reason the run is not stopped
        problems.record("hang error file", exc, "torchrun's summary does not name the hang as the rank's cause")
    try:
        os.kill(rank, signal.SIGTERM)
    except OSError:
        return False
    return wait_main(RANK_STOP_S)
