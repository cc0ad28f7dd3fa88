"""What /proc says about a process someone else started: its command line, a few environment variables, whether
it runs Python and has torch loaded. Reads only; every reader returns None (or empty) where /proc refuses."""

from __future__ import annotations

import os

from dlprobe.redact import redact_env

# torch names each DataLoader worker's main thread this (torch/utils/data/_utils/worker.py, torch >= 2.2), which
# is the process's comm.
TORCH_WORKER_COMM = "pt_data_worker"
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


def exists(pid: int) -> bool:
    return pid > 0 and os.path.exists(f"/proc/{pid}/stat")


def read_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            data = f.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in data.split(b"\0") if part]


def read_ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def read_environ(pid: int, names: tuple[str, ...] = RANK_VARS) -> dict[str, str] | None:
    """The named variables of the process's environment at its start; None where it may not be read (another
    user's process without CAP_SYS_PTRACE)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    found = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode(errors="replace")
        if sep and name in names:
            found[name] = value.decode(errors="replace")
    return redact_env(found)  # only rank variables are asked for today; a credential never leaves this reader


# PF_KTHREAD in /proc/PID/stat's flags (include/linux/sched.h): the process is one of the kernel's own threads.
PF_KTHREAD = 0x00200000


def is_kernel_thread(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return bool(int(data[data.rindex(b")") + 2 :].split()[6]) & PF_KTHREAD)
    except (OSError, IndexError, ValueError):
        return False


def owner(pid: int) -> int | None:
    """The uid that owns the process (its /proc directory); None once it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def exe_name(pid: int) -> str | None:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None


def is_python(pid: int, cmdline: list[str] | None = None) -> bool:
    """The process runs a Python interpreter (by its executable, else its first word)."""
    names = [exe_name(pid) or ""]
    args = cmdline if cmdline is not None else read_cmdline(pid)
    if args:
        names.append(os.path.basename(args[0]))
    return any(name.startswith(("python", "pypy")) for name in names)


def has_torch(pid: int) -> bool:
    """torch's C extension is mapped into the process (it has imported torch)."""
    return torch_mapped(pid)[0]


def torch_mapped(pid: int) -> tuple[bool, str | None]:
    """(torch's C extension is mapped into the process, why its maps could not be read: None where they were)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            for line in f:
                if b"libtorch" in line or b"/torch/_C" in line:
                    return True, None
    except PermissionError as exc:  # another user's process, or one that is not dumpable
        return False, exc.strerror or "permission denied"
    except OSError as exc:
        return False, exc.strerror or str(exc)
    return False, None


def exit_state(pid: int) -> tuple[bool, int | None]:
    """(gone, how it ended): gone once the pid is missing or a zombie; for a zombie, its wait status decoded as
    -signal (killed by a signal) or the exit code, from /proc/PID/stat's exit_code field (Linux >= 3.5)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True, None
    fields = data[data.rindex(b")") + 2 :].split()
    if not fields or fields[0] not in (b"Z", b"X"):
        return False, None
    try:
        status = int(fields[49])
    except (IndexError, ValueError):
        return True, None
    return True, -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
