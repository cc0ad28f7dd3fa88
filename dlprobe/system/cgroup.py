"""The one reader of cgroups (v1 and v2): which cgroup a process is in, and the limits on the path up to the root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 says "no limit" with a huge page-aligned number (PAGE_COUNTER_MAX pages) rather than v2's "max".
V1_UNLIMITED = 1 << 62
# Per controller, the file whose presence marks a v2 or v1 cgroup of that controller.
_V2_FILE = {"memory": "memory.max", "cpu": "cpu.max"}
_V1_FILE = {"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us"}
_V1_MOUNTS = {"memory": ("memory",), "cpu": ("cpu", "cpu,cpuacct", "cpuacct,cpu")}


def memberships(pid: int | str = "self") -> list[tuple[str, str]]:
    """(controllers, path) per line of /proc/PID/cgroup; controllers is "" for the v2 hierarchy."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


def controller_dir(
    controller: str,
    pid: int | str = "self",
    root: Path = CGROUP_ROOT,
    member_of: list[tuple[str, str]] | None = None,
) -> tuple[Path, Path, int] | None:
    """(the process's cgroup directory, the hierarchy's root, cgroup version) for "memory" or "cpu"; None if the
    controller's files cannot be read."""
    for controllers, path in memberships(pid) if member_of is None else member_of:
        rel = path.lstrip("/")
        if controllers == "" and (root / "cgroup.controllers").exists():
            found = _existing(root, rel, _V2_FILE[controller])
            if found is not None:
                return found, root, 2
        elif controller in controllers.split(","):
            for name in (controllers, *_V1_MOUNTS[controller]):
                found = _existing(root / name, rel, _V1_FILE[controller])
                if found is not None:
                    return found, root / name, 1
    return None


def _existing(base: Path, rel: str, marker: str) -> Path | None:
    # Without a cgroup namespace a container sees the host's path in /proc/PID/cgroup but has its own cgroup
    # mounted as the root: then the root is the process's cgroup.
    for candidate in (base / rel, base):
        if (candidate / marker).exists():
            return candidate
    return None


def walk_up(directory: Path, root: Path) -> Iterator[Path]:
    """The directory, its parents, up to and including the hierarchy's root (a parent's limit binds its children)."""
    while True:
        yield directory
        if directory == root or root not in directory.parents:
            return
        directory = directory.parent


def read_int(path: Path) -> int | None:
    """An integer cgroup file; None when unreadable or "max"."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return None if text == "max" else int(text)
    except ValueError:
        return None


def _memory_limit(directory: Path, version: int) -> int | None:
    limit = read_int(directory / ("memory.max" if version == 2 else "memory.limit_in_bytes"))
    return None if limit is None or limit >= V1_UNLIMITED else limit


def tightest_memory_limit(directory: Path, root: Path, version: int) -> tuple[int, Path] | None:
    """The smallest memory limit from the process's cgroup up to the root, and the directory that sets it."""
    best: tuple[int, Path] | None = None
    for d in walk_up(directory, root):
        limit = _memory_limit(d, version)
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, d)
    return best


def memory_dir(pid: int | str = "self", root: Path = CGROUP_ROOT) -> tuple[Path, Path, int] | None:
    """The memory cgroup of a process: (its directory, the hierarchy's root, version)."""
    return controller_dir("memory", pid, root)


def memory_state(where: tuple[Path, Path, int] | None) -> dict[str, Any] | None:
    """usage, limit (the tightest on the way to the root, None when unlimited everywhere), limit_dir (the cgroup
    that sets it) and oom_kill (kills of this cgroup's processes). usage is that of the cgroup holding the limit,
    so the two compare; without a limit it is the process's own cgroup's."""
    if where is None:
        return None
    directory, root, version = where
    found = tightest_memory_limit(directory, root, version)
    limit, limit_dir = found if found is not None else (None, None)
    at = limit_dir or directory
    usage = read_int(at / ("memory.current" if version == 2 else "memory.usage_in_bytes"))
    # v2's memory.events counts a cgroup's kills and its descendants'; v1's oom_control only its own processes'.
    events = directory / ("memory.events" if version == 2 else "memory.oom_control")
    return {
        "usage": usage,
        "limit": limit,
        "limit_dir": str(limit_dir) if limit_dir is not None else None,
        "oom_kill": _oom_kills(events),
    }


def reclaimable_cache(where: tuple[Path, Path, int] | None) -> int | None:
    """Bytes of the limiting cgroup's usage that are page cache the kernel drops before it OOM-kills: file pages not
    mapped by a process, not shared memory (tmpfs, /dev/shm) and not dirty. None when memory.stat is unreadable.

    The usage counts every file page first read or written inside the cgroup: a job that writes logs (dlprobe's own
    run directory included) or reads its dataset holds many of them, and none is memory its workers lack."""
    if where is None:
        return None
    directory, root, version = where
    found = tightest_memory_limit(directory, root, version)
    try:
        text = ((found[1] if found else directory) / "memory.stat").read_text()
    except OSError:
        return None
    stat = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            stat[key] = int(value)
    keys: tuple[str, ...]
    if version == 2:  # hierarchical already; "file" holds shmem too
        keys = ("file", "file_mapped", "shmem", "file_dirty", "file_writeback")
    else:  # the limit's own cgroup and its children: the total_ rows (usage_in_bytes is hierarchical)
        keys = tuple(f"total_{k}" if f"total_{k}" in stat else k for k in ("cache", "mapped_file", "shmem", "dirty",
                                                                          "writeback"))  # fmt: skip
    if keys[0] not in stat:
        return None
    cache, *held = (stat.get(k, 0) for k in keys)
    return max(0, cache - sum(held))


def _oom_kills(events: Path) -> int | None:
    try:
        text = events.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _cpu_quota(directory: Path, version: int) -> float | None:
    if version == 2:
        try:
            quota, period = (directory / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            return None
        return None if quota == "max" else int(quota) / int(period)
    quota_us = read_int(directory / "cpu.cfs_quota_us")
    period_us = read_int(directory / "cpu.cfs_period_us")
    if quota_us is None or period_us is None:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def cpu_quota(
    pid: int | str = "self", root: Path = CGROUP_ROOT, member_of: list[tuple[str, str]] | None = None
) -> float | None:
    """The tightest CPU quota in cores (e.g. 2.5) on the way to the root; None when unlimited."""
    where = controller_dir("cpu", pid, root, member_of)
    if where is None:
        return None
    directory, top, version = where
    quotas = [q for d in walk_up(directory, top) if (q := _cpu_quota(d, version)) is not None]
    return min(quotas) if quotas else None
