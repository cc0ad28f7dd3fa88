"""What the kernel says a process is doing: run state, CPU ticks, wait channel, current syscall, blocked fd."""

from __future__ import annotations

import os
import platform
from typing import Any

# Syscalls that mean "waiting for data or a peer", by architecture (x86_64, aarch64).
_SYSCALLS = {
    "x86_64": {
        0: "read", 2: "open", 7: "poll", 17: "pread64", 19: "readv", 23: "select", 35: "nanosleep",
        42: "connect", 43: "accept", 45: "recvfrom", 47: "recvmsg", 61: "wait4", 72: "fcntl", 73: "flock",
        202: "futex", 230: "clock_nanosleep", 232: "epoll_wait", 257: "openat", 262: "newfstatat",
        270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 288: "accept4",
    },
    "aarch64": {
        25: "fcntl", 32: "flock", 56: "openat", 63: "read", 65: "readv", 67: "pread64", 72: "pselect6",
        73: "ppoll", 79: "newfstatat", 98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 202: "accept",
        203: "connect", 207: "recvfrom", 212: "recvmsg", 242: "accept4", 260: "wait4", 22: "epoll_pwait",
    },
}  # fmt: skip
# Syscalls whose first argument is the file descriptor being waited on.
FD_SYSCALLS = {"read", "pread64", "readv", "recvfrom", "recvmsg", "accept", "accept4", "connect", "flock", "fcntl"}


def syscall_name(number: int) -> str | None:
    return _SYSCALLS.get(platform.machine(), {}).get(number)


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def _base(pid: int, tid: int | None) -> str:
    # one thread of the process (a DataLoader worker that is a thread): the kernel keeps the same files per task
    return f"/proc/{pid}" if tid is None else f"/proc/{pid}/task/{tid}"


def cpu_ticks(pid: int, tid: int | None = None) -> tuple[str, int] | None:
    """(state letter, utime+stime in clock ticks) from /proc/PID/stat (/proc/PID/task/TID/stat: one thread's)."""
    text = _read(f"{_base(pid, tid)}/stat")
    if not text:
        return None
    # comm may contain spaces and parentheses: the fields start after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def read_state(pid: int, tid: int | None = None) -> dict[str, Any] | None:
    """State, CPU ticks, wchan, syscall (name and blocked fd target), thread count; None if it is gone. With `tid`:
    that one thread's (no thread count)."""
    ticks = cpu_ticks(pid, tid)
    if ticks is None:
        return None
    base = _base(pid, tid)
    state: dict[str, Any] = {"state": ticks[0], "cpu_ticks": ticks[1]}
    wchan = _read(f"{base}/wchan")
    state["wchan"] = wchan.strip() if wchan and wchan.strip() not in ("0", "") else None
    if tid is None:
        try:
            state["threads"] = len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            state["threads"] = None
    state["comm"] = (_read(f"{base}/comm") or "").strip() or None
    state.update(_syscall(pid, base))
    return state


def _syscall(pid: int, base: str) -> dict[str, Any]:
    text = _read(f"{base}/syscall")
    if not text:
        return {"syscall": None}
    parts = text.split()
    if parts[0] == "running":
        return {"syscall": "running"}
    try:
        number = int(parts[0])
    except ValueError:
        return {"syscall": None}
    name = syscall_name(number) or f"syscall {number}"
    out: dict[str, Any] = {"syscall": name}
    if name in FD_SYSCALLS and len(parts) > 1:
        try:
            fd = int(parts[1], 16)
            out["fd"] = fd
            out["fd_target"] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except (ValueError, OSError):  # noqa: S110 - not a file wait, or the fd closed meanwhile
            pass
    return out


def clock_ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100
