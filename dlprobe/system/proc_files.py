"""/proc/PID/stat and /proc/PID/schedstat of many processes, read every tick through descriptors kept open."""

from __future__ import annotations

import errno
import os

from dlprobe.system import procmem

# Opening, reading and closing a /proc file costs about three times one pread() on a descriptor kept open: with
# 64 processes read four times a second that difference is most of the cheap readings' CPU. A descriptor also
# stays with the process it was opened for: once that process is gone it reads ESRCH, never a later process that
# reused its pid. Past this many processes the rest are opened per read, so a huge tree cannot exhaust the
# supervisor's descriptors (two per process).
MAX_KEPT = 256
READ_SIZE = 1024  # /proc/PID/stat is under 400 bytes, schedstat under 100


class ProcFiles:
    """Per-process stat/schedstat readers; `forget(pid)` when it is gone, `close()` at the end."""

    def __init__(self, keep_open: bool = True) -> None:
        self.keep_open = keep_open
        self.fds: dict[tuple[int, str], int] = {}

    def _read(self, pid: int, name: str) -> bytes | None:
        key = (pid, name)
        fd = self.fds.get(key)
        if fd is None:
            try:
                fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            if not self.keep_open or len(self.fds) >= 2 * MAX_KEPT:
                try:
                    return os.read(fd, READ_SIZE)
                except OSError:
                    return None
                finally:
                    os.close(fd)
            self.fds[key] = fd
        try:
            return os.pread(fd, READ_SIZE, 0)
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # ESRCH: the process is gone; anything else, try a fresh open next time
                self._close(key)
            return None

    def stat(self, pid: int) -> tuple[int, int, float] | None:
        """procmem.read_stat's (rss bytes, page faults, CPU seconds), or None when the process is gone."""
        data = self._read(pid, "stat")
        return procmem.parse_stat(data) if data else None

    def run_delay(self, pid: int) -> float | None:
        """procmem.read_run_delay's seconds on a run queue, or None."""
        data = self._read(pid, "schedstat")
        return procmem.parse_run_delay(data) if data else None

    def _close(self, key: tuple[int, str]) -> None:
        fd = self.fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def forget(self, pid: int) -> None:
        for name in ("stat", "schedstat"):
            self._close((pid, name))

    def close(self) -> None:
        for key in list(self.fds):
            self._close(key)
