"""What this machine says about a past failure: kernel OOM kills, /dev/shm, cgroup memory, open-file limit."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from dlprobe.system import procmem

KERNEL_LOG_FILES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")
MAX_OOM_KILLS = 200
DMESG_TIMEOUT_S = 10.0

_STAMP = re.compile(r"\[\s*(?P<t>\d+\.\d+)\]")
_KILLED = re.compile(r"Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)(?P<rest>.*)")
_OOM_KILL = re.compile(r"oom-kill:(?P<info>\S*task=(?P<comm>[^,]*),pid=(?P<pid>\d+)\S*)")
_ANON_RSS = re.compile(r"anon-rss:(?P<kb>\d+)kB")


@dataclass
class OomKill:
    """One kernel OOM kill, merged from its `oom-kill:` and `Killed process` lines."""

    pid: int
    comm: str
    cgroup: bool = False  # killed because a memory cgroup hit its limit (not the whole machine)
    uptime_s: float | None = None  # kernel timestamp: seconds since boot
    time: float | None = None  # the same as a Unix time, where the boot time is known
    anon_rss_bytes: int | None = None
    memcg: str | None = None
    line: str = ""


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


def parse_oom_lines(lines: Iterable[str], boot_time: float | None = None) -> list[OomKill]:
    """OOM kills in kernel log lines (dmesg or syslog form), oldest first, one per (pid, time)."""
    kills: deque[OomKill] = deque(maxlen=MAX_OOM_KILLS)
    pending: dict[int, OomKill] = {}  # oom-kill: line seen, its `Killed process` line not yet
    for line in lines:
        killed = _KILLED.search(line)
        info = _OOM_KILL.search(line) if killed is None else None
        if killed is None and info is None:
            continue
        stamp = _STAMP.search(line)
        uptime = float(stamp["t"]) if stamp else None
        m = killed or info
        assert m is not None
        pid = int(m["pid"])
        kill = pending.pop(pid, None) or OomKill(pid, m["comm"], uptime_s=uptime)
        kill.comm = m["comm"] or kill.comm
        kill.line = line.strip()[:500]
        if info is not None:
            kill.cgroup = "CONSTRAINT_MEMCG" in info["info"]
            memcg = re.search(r"task_memcg=([^,]*)", info["info"])
            kill.memcg = memcg.group(1) if memcg else None
            pending[pid] = kill
            continue
        kill.cgroup = kill.cgroup or "Memory cgroup out of memory" in line
        rss = _ANON_RSS.search(killed["rest"]) if killed else None
        kill.anon_rss_bytes = int(rss["kb"]) * 1024 if rss else None
        kills.append(kill)
    kills.extend(pending.values())  # an oom-kill: line whose Killed line was cut off
    for kill in kills:
        if kill.uptime_s is not None and boot_time is not None:
            kill.time = boot_time + kill.uptime_s
    return list(kills)


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
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
        except FileNotFoundError:
            continue
        except OSError as exc:
            errors.append(f"{candidate}: {exc.strerror or exc}")
    return KernelLog(None, "; ".join(errors) or "no kernel log found")


def check_machine(kernel_log: str | None = None) -> MachineFacts:
    """Read everything a triage may use about this machine; nothing here raises."""
    cgroup_dir = procmem.cgroup_memory_dir(os.getpid())
    memory = procmem.cgroup_memory(cgroup_dir)
    cgroup: dict[str, Any] | None = None if memory is None else {**memory, "path": str(cgroup_dir)}
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
        except OSError:
            pass
    return time.time()
