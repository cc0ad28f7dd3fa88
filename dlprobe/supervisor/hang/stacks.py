"""Stack dumps of a live process: py-spy from outside (with native frames where it can), else faulthandler
inside the target (registered by the hooks on a real-time signal), both turned into one frame model."""

from __future__ import annotations

import json
import linecache
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlprobe import atomic
from dlprobe.frames import is_user_file
from dlprobe.supervisor.hang import procstate
from dlprobe.system.pyspy import PERMISSION_ADVICE as PERMISSION_ADVICE
from dlprobe.system.pyspy import PERMISSION_ERROR, STOPPED_STATES, error_line, stopped_note

DUMP_TIMEOUT_S = 20.0
MISSING_ADVICE = "Install py-spy (`pip install py-spy`) for stacks with native frames, taken from outside the process."


@dataclass
class DumpResult:
    """The threads of one process (frames innermost first), or why there are none."""

    tool: str | None = None  # py-spy-native | py-spy | faulthandler
    threads: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    permission_denied: bool = False
    raw: str | None = None
    stopped: bool = False  # the process is stopped (state T or t): no dump was tried, none is refused


def stopped_result(pid: int) -> DumpResult | None:
    """The result for a process that is stopped, else None: py-spy cannot pause a stopped process and its error
    names ptrace, and a faulthandler signal waits until the process continues."""
    ticks = procstate.cpu_ticks(pid)
    if ticks is None or ticks[0] not in STOPPED_STATES:
        return None
    return DumpResult(error=stopped_note(pid, ticks[0]), stopped=True)


def _frame(name: str, filename: str | None, line: int | None, native: bool) -> dict[str, Any]:
    frame: dict[str, Any] = {"name": name, "file": filename, "line": line, "native": native}
    frame["user"] = not native and is_user_file(filename)
    if not native and filename and line:
        code = linecache.getline(filename, line).strip()
        if code:
            frame["code"] = code
    return frame


def parse_py_spy(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    threads = []
    for thread in data:
        frames = []
        for fr in thread.get("frames") or []:
            native = fr.get("module") is not None  # py-spy names the shared object only for native frames
            filename = fr.get("module") if native else fr.get("filename")
            frames.append(_frame(str(fr.get("name")), filename, fr.get("line") or None, native))
        threads.append(
            {
                "name": thread.get("thread_name"),
                "os_tid": thread.get("os_thread_id"),
                "active": thread.get("active"),
                "frames": frames,
            }
        )
    return threads


_FH_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')


def parse_faulthandler(text: str) -> list[dict[str, Any]]:
    """Threads from faulthandler's text (the last complete dump in the text)."""
    threads: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        head = _FH_THREAD.match(line)
        if head:
            current = {"name": None, "os_tid": None, "ident": head.group(1), "frames": []}
            if line.startswith("Current thread"):
                current["name"] = "current"
            threads.append(current)
            continue
        frame = _FH_FRAME.match(line)
        if frame and current is not None:
            current["frames"].append(_frame(frame.group(3), frame.group(1), int(frame.group(2)), False))
    return threads


def _run_py_spy(exe: str, pid: int, native: bool, nonblocking: bool = False) -> tuple[int, str, str]:
    args = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else [])
    args += ["--nonblocking"] if nonblocking else []
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, "", f"py-spy did not finish within {DUMP_TIMEOUT_S:.0f}s"
    except OSError as exc:
        return -1, "", f"cannot run py-spy: {exc}"
    return proc.returncode, proc.stdout, proc.stderr


def py_spy_dump(exe: str, pid: int, native: bool = True, nonblocking: bool = False) -> DumpResult:
    """Dump with native frames first; fall back to Python frames only when native unwinding fails.

    `nonblocking` never pauses the process (`dlprobe attach`: a job dlprobe did not start); py-spy then reads
    Python frames only, and a frame may be torn if the process moved while it was read."""
    stopped = stopped_result(pid)
    if stopped is not None:
        return stopped
    attempts = [True, False] if native and not nonblocking else [False]
    error = None
    for with_native in attempts:
        code, out, err = _run_py_spy(exe, pid, with_native, nonblocking)
        if code == 0:
            try:
                data = json.loads(out)
            except ValueError:
                error = "py-spy printed no JSON"
                continue
            return DumpResult("py-spy-native" if with_native else "py-spy", parse_py_spy(data), raw=out)
        error = error_line(err or out) or f"py-spy exited with {code}"
        if PERMISSION_ERROR.search(err or ""):
            # stopped while py-spy attached: its failure is not a refusal either
            return stopped_result(pid) or DumpResult(error=error, permission_denied=True)
        if not os.path.exists(f"/proc/{pid}"):
            return DumpResult(error="the process exited while it was being dumped")
    return DumpResult(error=error)


def faulthandler_dump(pid: int, signum: int, dump_file: Path, wait_s: float = 2.0) -> DumpResult:
    """Ask the target's own faulthandler for its stacks (Python frames only) and read them back."""
    try:
        before = dump_file.stat().st_size
    except OSError:
        before = 0
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return DumpResult(error="the process exited before it could be dumped")
    except OSError as exc:
        return DumpResult(error=f"cannot signal the process: {exc.strerror}")
    deadline = time.monotonic() + wait_s
    text = ""
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            with atomic.open_read(dump_file) as f:
                f.seek(before)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            text = ""
        # the dump is complete once a thread section ends with a blank line or enough time passed
        if text and text.endswith("\n") and time.monotonic() > deadline - wait_s + 0.3:
            break
    if not text:
        return DumpResult(error="faulthandler wrote nothing (the process may be stuck in a signal-blocking call)")
    return DumpResult("faulthandler", parse_faulthandler(text), raw=text)
