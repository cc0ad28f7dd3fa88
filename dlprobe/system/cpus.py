"""How many CPU cores the training process may really use: its affinity mask and its cgroup CPU quota."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_paths(pid: int | str) -> list[tuple[str, str]]:
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


def _quota_v2(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def _quota_v1(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _walk_up(directory: Path, root: Path, read: Any) -> float | None:
    """The tightest quota on the way from the process's cgroup up to the root (a parent's limit binds too)."""
    best: float | None = None
    while True:
        quota = read(directory)
        if quota is not None:
            best = quota if best is None else min(best, quota)
        if directory == root or root not in directory.parents:
            return best
        directory = directory.parent


def cgroup_cpu_quota(
    pid: int | str = "self", root: Path = CGROUP_ROOT, memberships: list[tuple[str, str]] | None = None
) -> float | None:
    """CPU quota in cores (e.g. 2.5) from cgroup v2 cpu.max or v1 cpu.cfs_quota_us; None when unlimited."""
    for controllers, path in _cgroup_paths(pid) if memberships is None else memberships:
        rel = path.lstrip("/")
        if controllers == "" and (root / "cgroup.controllers").exists():
            return _walk_up(root / rel, root, _quota_v2)
        if "cpu" in controllers.split(","):
            for name in (controllers, "cpu", "cpu,cpuacct"):
                base = root / name
                if (base / rel).exists():
                    return _walk_up(base / rel, base, _quota_v1)
    return None


def _affinity(pid: int | str) -> int:
    try:
        return len(os.sched_getaffinity(0 if pid == "self" else int(pid)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _usable(affinity: int, quota: float | None) -> int:
    return affinity if quota is None else max(1, min(affinity, math.ceil(quota)))


def usable_cores(pid: int | str = "self") -> int:
    """Cores the process may really keep busy: its affinity mask, capped by its cgroup CPU quota (rounded up)."""
    return _usable(_affinity(pid), cgroup_cpu_quota(pid))


def cpu_facts(pid: int | str = "self") -> dict[str, Any]:
    """cpu_count, cpu_affinity (cores in the mask), cpu_quota (cores, or None) and usable_cores (the smaller)."""
    affinity = _affinity(pid)
    quota = cgroup_cpu_quota(pid)
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpu_quota": quota,
        "usable_cores": _usable(affinity, quota),
    }
