"""How many CPU cores the training process may really use: its affinity mask and its cgroup CPU quota."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from dlprobe.system import cgroup
from dlprobe.system.cgroup import CGROUP_ROOT


def cgroup_cpu_quota(
    pid: int | str = "self", root: Path = CGROUP_ROOT, memberships: list[tuple[str, str]] | None = None
) -> float | None:
    """CPU quota in cores (e.g. 2.5) from cgroup v2 cpu.max or v1 cpu.cfs_quota_us; None when unlimited."""
    return cgroup.cpu_quota(pid, root, memberships)


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
