"""Kernel log lines about OOM kills, read from /dev/kmsg (where the container lets us) for given pids."""

from __future__ import annotations

import os
import re
import time
from typing import Any

KMSG = "/dev/kmsg"
_KILLED = re.compile(r"Killed process (\d+) \(([^)]*)\)(.*)")
_RSS = re.compile(r"(anon|file|shmem)-rss:(\d+)kB")


def since_boot() -> float:
    """Seconds since boot on the clock /dev/kmsg timestamps use."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def read_records(path: str = KMSG, max_records: int = 100_000) -> list[tuple[float, str]] | None:
    """(seconds since boot, message) of every record still in the ring buffer; None if unreadable."""
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
            except BrokenPipeError:  # the oldest records were overwritten while reading: keep going
                continue
            except OSError:
                break
            if not raw:
                break
            head, _, message = raw.decode(errors="replace").partition(";")
            fields = head.split(",")
            try:
                ts = int(fields[2]) / 1e6
            except (IndexError, ValueError):
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
    kills = []
    for ts, message in records:
        if ts < after_s:
            continue
        match = _KILLED.search(message)
        if match and int(match.group(1)) in pids:
            rss = {k: int(v) * 1024 for k, v in _RSS.findall(match.group(3))}
            kills.append(
                {
                    "pid": int(match.group(1)),
                    "comm": match.group(2),
                    "cgroup": message.startswith("Memory cgroup out of memory"),
                    "anon_rss_bytes": rss.get("anon"),
                    "shmem_rss_bytes": rss.get("shmem"),
                    "line": message[:300],
                }
            )
    return {"readable": True, "kills": kills}
