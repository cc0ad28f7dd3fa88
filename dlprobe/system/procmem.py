"""Cheap and expensive readings of process and system memory straight from /proc and /sys."""

from __future__ import annotations

import os

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of utime/stime in /proc/PID/stat
SHM_PATH = "/dev/shm"


def read_rss(pid: int) -> int | None:
    """Resident set size from /proc/PID/statm: a few microseconds, so it can be read often."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


def read_stat(pid: int) -> tuple[int, int, float] | None:
    """(rss bytes, minor+major page faults, CPU seconds: utime+stime) from /proc/PID/stat: as cheap as statm.

    The fault count rises with every page the process touches for the first time or copies on write, so it tells
    whether its USS can have moved since the last smaps_rollup without walking its page tables. The CPU time tells
    a worker on the CPU from one asleep (waiting for a read): over the same wall time, busy or waiting."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_stat(f.read())
    except OSError:
        return None


PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit (a kill was delivered, or it called exit)


def parse_stat(data: bytes) -> tuple[int, int, float] | None:
    """read_stat's (rss bytes, page faults, CPU seconds) from the bytes of /proc/PID/stat; None for a process that
    is exiting or has exited (a zombie)."""
    try:
        # comm (field 2) may hold spaces and parentheses; every later field follows the last ')'
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None  # exited, not yet reaped: its memory is gone (RSS reads 0), so it counts as gone
        if int(fields[6]) & PF_EXITING:
            # Dying: its pages are being unmapped (by exit, or the OOM reaper), so the workers that shared them hold
            # them alone from here on. Counted as gone, or their teardown readings are stamped as if it lived.
            return None
        cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return int(fields[21]) * PAGE_SIZE, int(fields[7]) + int(fields[9]), cpu_s
    except (IndexError, ValueError):
        return None


def read_run_delay(pid: int) -> float | None:
    """Seconds the process has waited on a run queue (runnable, no core free), from /proc/PID/schedstat.

    Wall time less CPU time is not all sleep: on an oversubscribed machine a CPU-bound worker also waits for a
    core, and that wait must not read as waiting for I/O. None where the kernel has no schedstats."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return parse_run_delay(f.read())
    except OSError:
        return None


def parse_run_delay(data: bytes) -> float | None:
    """read_run_delay's seconds from the bytes of /proc/PID/schedstat."""
    try:
        return int(data.split()[1]) / 1e9
    except (IndexError, ValueError):
        return None


def read_process_schedstat(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting on a run queue) summed over every thread of the process, from
    /proc/PID/task/*/schedstat in nanoseconds: a short trial's CPU time to the microsecond, where /proc/PID/stat
    counts 10 ms ticks. Every thread, because /proc/PID/schedstat is its main thread's alone, and a DataLoader
    worker's queue feeder thread pickles each batch into shared memory (on a loader of 64 small tensors a sample,
    half the worker's CPU). A thread that ended takes its time with it, so over a window the sum may read a little
    short, never long. None where the kernel has no schedstats."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    cpu = runq = 0.0
    read = False
    for tid in tids:
        one = read_task_schedstat(f"/proc/{pid}/task/{tid}/schedstat")
        if one is not None:
            cpu, runq, read = cpu + one[0], runq + one[1], True
    return (cpu, runq) if read else None


def read_task_schedstat(path: str) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds on a run queue) from one task's schedstat file; None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            fields = f.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


# smaps_rollup fields kept by kind of page, under the names samples use. Anonymous is heap and copy-on-write
# copies; Private_Dirty rising while Anonymous stays flat is copy-on-write. Pss_Anon/File/Shmem exist since Linux
# 5.3 and are recorded only where the kernel has them.
KIND_FIELDS = {
    "Anonymous": "anon",
    "Private_Dirty": "private_dirty",
    "Private_Clean": "private_clean",
    "Pss_Anon": "pss_anon",
    "Pss_File": "pss_file",
    "Pss_Shmem": "pss_shmem",
}


def parse_smaps_rollup(text: str) -> dict[str, int] | None:
    """rss/uss/pss/swap and the page kinds (KIND_FIELDS) in bytes, from the text of /proc/PID/smaps_rollup."""
    fields: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            fields[key] = int(parts[0]) * 1024
    if "Rss" not in fields:
        return None
    values = {
        "rss": fields["Rss"],
        "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
        "pss": fields.get("Pss", 0),
        "swap": fields.get("Swap", 0),
    }
    values.update({name: fields[key] for key, name in KIND_FIELDS.items() if key in fields})
    return values


def read_smaps_rollup(pid: int) -> dict[str, int] | None:
    """rss/uss/pss/swap and memory by kind of page. Walks page tables, so it costs milliseconds on a big process."""
    return read_smaps_rollup_or_why(pid)[0]


def read_smaps_rollup_or_why(pid: int) -> tuple[dict[str, int] | None, str | None]:
    """read_smaps_rollup, and why it could not be read where the process is still there (a non-dumpable process,
    another user's: PermissionError); (None, None) when the process has gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read().decode()
    except (FileNotFoundError, ProcessLookupError):
        return None, None
    except OSError as exc:
        if not os.path.exists(f"/proc/{pid}"):
            return None, None
        return None, f"{type(exc).__name__}: {exc.strerror or exc}"
    return parse_smaps_rollup(text), None


def read_thread_cpu(pid: int, tid: int) -> tuple[float, float | None] | None:
    """(CPU seconds: utime+stime, seconds waited for a core) of one thread, from /proc/PID/task/TID/stat and
    schedstat: a DataLoader worker that is a thread has no process of its own to read. None once it has ended."""
    task = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{task}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None
        cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None
    try:
        with open(f"{task}/schedstat", "rb") as f:
            delay: float | None = int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        delay = None
    return cpu_s, delay


def read_comm(pid: int, tid: int | None = None) -> str | None:
    """The process's name (a thread's, with `tid`: torch names its worker threads)."""
    path = f"/proc/{pid}/comm" if tid is None else f"/proc/{pid}/task/{tid}/comm"
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def shm_usage(path: str = SHM_PATH) -> dict[str, int] | None:
    """Used and total bytes of the /dev/shm tmpfs."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    return {"used": (st.f_blocks - st.f_bfree) * st.f_frsize, "total": total}


def system_memory() -> dict[str, int]:
    """MemTotal and MemAvailable from /proc/meminfo, in bytes."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:  # noqa: S110 - no /proc/meminfo (not Linux): zeros say unknown
        pass
    return {"total": out.get("MemTotal", 0), "available": out.get("MemAvailable", 0)}
