"""What this machine says about a past failure: kernel OOM kills, /dev/shm, cgroup memory, open-file limit."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from dlprobe.system import cgroup as cgroup_reader
from dlprobe.system import procmem
from dlprobe.system.kernlog import OomKill, parse_oom_lines

KERNEL_LOG_FILES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")
DMESG_TIMEOUT_S = 10.0


@dataclass
class KernelLog:
    source: str | None  # "dmesg", a file path, or None when nothing could be read
    error: str | None = None
    kills: list[OomKill] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return self.source is not None


@dataclass
class MachineFacts:
    checked: bool
    kernel: KernelLog = field(default_factory=lambda: KernelLog(None, "not checked"))
    shm: dict[str, int] | None = None
    cgroup: dict[str, Any] | None = None
    nofile: tuple[int, int] | None = None
    mem_total: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kernel"]["readable"] = self.kernel.readable
        return out


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):  # noqa: S110 - no boot time: callers fall back to the log's own times
        pass
    return None


def _matching_lines(stream: IO[str]) -> Iterable[str]:
    # Only the few OOM lines are kept: a kernel log can be large.
    for line in stream:
        if "Killed process" in line or "oom-kill:" in line:
            yield line


def read_kernel_log(path: str | None = None) -> KernelLog:
    """OOM kills from `path` (a saved dmesg or syslog), else from `dmesg`, else from the usual log files."""
    boot = _boot_time()
    if path is not None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                # A file saved elsewhere: its kernel timestamps are not relative to this machine's boot.
                return KernelLog(path, kills=parse_oom_lines(_matching_lines(f), None))
        except OSError as exc:
            return KernelLog(None, f"cannot read {path}: {exc.strerror or exc}")
    errors = []
    try:
        proc = subprocess.Popen(["dmesg"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
        assert proc.stdout is not None and proc.stderr is not None
        kills = parse_oom_lines(_matching_lines(proc.stdout), boot)
        stderr = proc.stderr.read().strip()
        rc = proc.wait(timeout=DMESG_TIMEOUT_S)
        if rc == 0:
            return KernelLog("dmesg", kills=kills)
        errors.append(f"dmesg: {stderr.splitlines()[-1] if stderr else f'exit code {rc}'}")
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append(f"dmesg: {exc}")
    for candidate in KERNEL_LOG_FILES:
        try:
            with open(candidate, encoding="utf-8", errors="replace") as f:
                return KernelLog(candidate, kills=parse_oom_lines(_matching_lines(f), boot))
        except FileNotFoundError:  # noqa: S112 - this distribution keeps its kernel log elsewhere: try the next
            continue
        except OSError as exc:
            errors.append(f"{candidate}: {exc.strerror or exc}")
    return KernelLog(None, "; ".join(errors) or "no kernel log found")


def check_machine(kernel_log: str | None = None) -> MachineFacts:
    """Read everything a triage may use about this machine; nothing here raises."""
    where = cgroup_reader.memory_dir(os.getpid())
    memory = cgroup_reader.memory_state(where)
    cgroup: dict[str, Any] | None = None if memory is None or where is None else {**memory, "path": str(where[0])}
    try:
        nofile: tuple[int, int] | None = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        nofile = None
    return MachineFacts(
        checked=True,
        kernel=read_kernel_log(kernel_log),
        shm=procmem.shm_usage(),
        cgroup=cgroup,
        nofile=nofile,
        mem_total=procmem.system_memory()["total"] or None,
    )


def log_time(path: Path | None) -> float:
    """When the failure was written: the log's modification time (now for stdin)."""
    if path is not None:
        try:
            return path.stat().st_mtime
        except OSError:  # noqa: S110 - no such file: the log's age is now
            pass
    return time.time()
