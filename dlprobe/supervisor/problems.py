"""The supervisor's own failures that change a diagnosis (a log it could not write, a kernel record it could not
save): counted here, written to result.json "problems", and reported as probe-degraded findings."""

from __future__ import annotations

import errno
import threading
import time

from dlprobe.rundir.schema import SupervisorProblem

# The run directory's disk is full, over quota, or read-only: every later write would fail the same way.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def is_disk_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


class Problems:
    """Thread-safe (the output pumps are threads): one entry per place, its last error and how often it failed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_where: dict[str, SupervisorProblem] = {}
        # The first write a full (or read-only) disk refused: where, the error, when. The recording stops there.
        self.disk_stop: tuple[str, OSError, float] | None = None

    def record(self, where: str, exc: BaseException, consequence: str, at: float | None = None) -> None:
        with self._lock:
            if self.disk_stop is None and isinstance(exc, OSError) and is_disk_error(exc):
                self.disk_stop = (where, exc, time.time() if at is None else at)
            entry = self._by_where.get(where)
            count = entry["count"] + 1 if entry else 1
            self._by_where[where] = {
                "where": where,
                "type": type(exc).__name__,
                "message": str(exc)[:500],
                "consequence": consequence,
                "count": count,
            }

    def as_list(self) -> list[SupervisorProblem]:
        with self._lock:
            return list(self._by_where.values())
