"""Machine facts as triage quotes them: the kernel's OOM kills, the memory limits, /dev/shm."""

from __future__ import annotations

from typing import Any

from dlprobe.system.kernlog import OomKill
from dlprobe.triage.candidate import pids_text
from dlprobe.triage.machine import MachineFacts
from dlprobe.units import format_bytes


def kernel_note(machine: MachineFacts, pids: list[int]) -> str:
    if not machine.kernel.readable:
        return f"there was no kernel log to check ({machine.kernel.error})."
    return (f"the kernel log ({machine.kernel.source}) has no OOM kill for {pids_text(pids)}; if the run was on "
            "another machine or container, check its `dmesg` or pass it with --kernel-log.")  # fmt: skip


def kill_dict(kill: OomKill) -> dict[str, Any]:
    return {"pid": kill.pid, "comm": kill.comm, "cgroup": kill.cgroup, "anon_rss_bytes": kill.anon_rss_bytes,
            "uptime_s": kill.uptime_s}  # fmt: skip


def memory_facts(machine: MachineFacts) -> dict[str, Any]:
    cgroup = machine.cgroup or {}
    return {"cgroup_limit_bytes": cgroup.get("limit"), "cgroup_oom_kills": cgroup.get("oom_kill"),
            "mem_total_bytes": machine.mem_total}  # fmt: skip


def shm_facts(machine: MachineFacts) -> dict[str, Any]:
    shm = machine.shm or {}
    return {"shm_total_bytes": shm.get("total"), "shm_used_bytes": shm.get("used")}


def shm_here(machine: MachineFacts) -> str:
    if not machine.shm:
        return ""
    total = machine.shm["total"]
    note = f" /dev/shm on this machine is {format_bytes(total)} ({format_bytes(machine.shm['used'])} used now)"
    if total <= 64 * 1024 * 1024:
        note += ", the size of Docker's default"
    return note + "."
