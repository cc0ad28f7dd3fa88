"""The kernel's OOM-kill lines: the one parser (for /dev/kmsg records, dmesg and syslog text) and the kmsg reader."""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KMSG = "/dev/kmsg"
MAX_OOM_KILLS = 200
_STAMP = re.compile(r"\[\s*(?P<t>\d+\.\d+)\]")
_KILLED = re.compile(r"Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)(?P<rest>.*)")
_OOM_KILL = re.compile(r"oom-kill:(?P<info>\S*task=(?P<comm>[^,]*),pid=(?P<pid>\d+)\S*)")
_MEMCG = re.compile(r"task_memcg=([^,]*)")
_RSS = re.compile(r"(anon|file|shmem)-rss:(\d+)kB")


@dataclass
class OomKill:
    """One kernel OOM kill, merged from its `oom-kill:` and `Killed process` lines."""

    pid: int
    comm: str
    cgroup: bool = False  # killed because a memory cgroup hit its limit (not the whole machine)
    uptime_s: float | None = None  # kernel timestamp: seconds since boot
    time: float | None = None  # the same as a Unix time, where the boot time is known
    anon_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    memcg: str | None = None
    line: str = ""


def parse_oom_records(records: Iterable[tuple[float | None, str]]) -> list[OomKill]:
    """OOM kills in (seconds since boot, message) records, oldest first; the kernel writes `oom-kill:` (constraint,
    memcg) and `Killed process` (pid, rss) as two lines, merged here into one kill."""
    kills: deque[OomKill] = deque(maxlen=MAX_OOM_KILLS)
    pending: dict[int, OomKill] = {}  # oom-kill: line seen, its `Killed process` line not yet
    for uptime, line in records:
        killed = _KILLED.search(line)
        info = _OOM_KILL.search(line) if killed is None else None
        m = killed or info
        if m is None:
            continue
        pid = int(m["pid"])
        kill = pending.pop(pid, None) or OomKill(pid, m["comm"], uptime_s=uptime)
        kill.comm = m["comm"] or kill.comm
        kill.line = line.strip()[:500]
        if info is not None:
            kill.cgroup = "CONSTRAINT_MEMCG" in info["info"]
            memcg = _MEMCG.search(info["info"])
            kill.memcg = memcg.group(1) if memcg else None
            pending[pid] = kill
            continue
        assert killed is not None
        kill.cgroup = kill.cgroup or "Memory cgroup out of memory" in line
        rss = {k: int(v) * 1024 for k, v in _RSS.findall(killed["rest"])}
        kill.anon_rss_bytes = rss.get("anon")
        kill.shmem_rss_bytes = rss.get("shmem")
        kills.append(kill)
    kills.extend(pending.values())  # an oom-kill: line whose Killed line was cut off
    return list(kills)


def parse_oom_lines(lines: Iterable[str], boot_time: float | None = None) -> list[OomKill]:
    """OOM kills in kernel log text (dmesg `[ 12.3]` or syslog form); `time` is set where the boot time is known."""

    def records() -> Iterable[tuple[float | None, str]]:
        for line in lines:
            stamp = _STAMP.search(line)
            yield (float(stamp["t"]) if stamp else None), line

    kills = parse_oom_records(records())
    for kill in kills:
        if kill.uptime_s is not None and boot_time is not None:
            kill.time = boot_time + kill.uptime_s
    return kills


def since_boot() -> float:
    """Seconds since boot on the clock /dev/kmsg timestamps use."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def open_at_end(path: str = KMSG) -> int | None:
    """The kernel log opened after its last record, so reading it at the end of a run gives only that run's records:
    reading the whole ring buffer (up to megabytes) took 0.1-0.9 s after every run on a busy machine."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        os.close(fd)
        return None
    return fd


def read_records(path: str = KMSG, max_records: int = 100_000, fd: int | None = None) -> list[tuple[float, str]] | None:
    """(seconds since boot, message) of every record still in the ring buffer (or, from an `open_at_end` fd, of
    every record since); None if unreadable. Closes `fd`."""
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
    records = []
    try:
        for _ in range(max_records):
            try:
                raw = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # noqa: S112 - oldest records overwritten while reading: keep going
                continue
            except OSError:
                break
            if not raw:
                break
            head, _, message = raw.decode(errors="replace").partition(";")
            fields = head.split(",")
            try:
                ts = int(fields[2]) / 1e6
            except (IndexError, ValueError):  # noqa: S112 - a record without a timestamp is no OOM kill we can place
                continue
            records.append((ts, message.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return records


def oom_kills(pids: set[int], after_s: float, records: list[tuple[float, str]] | None = None) -> dict[str, Any]:
    """OOM-killer lines naming any of `pids` logged after `after_s` (seconds since boot)."""
    if records is None:
        records = read_records()
    if records is None:
        return {"readable": False, "kills": []}
    found = parse_oom_records((ts, message) for ts, message in records if ts >= after_s)
    kills = [
        {
            "pid": kill.pid,
            "comm": kill.comm,
            "cgroup": kill.cgroup,
            "anon_rss_bytes": kill.anon_rss_bytes,
            "shmem_rss_bytes": kill.shmem_rss_bytes,
            "memcg": kill.memcg,
            "line": kill.line,
        }
        for kill in found
        if kill.pid in pids
    ]
    return {"readable": True, "kills": kills}
