"""The supervisor's own failures that change a diagnosis (a log it could not write, a kernel record it could not
save): counted here, written to result.json "problems", and reported as probe-degraded findings."""

from __future__ import annotations

import threading

from dlprobe.rundir.schema import SupervisorProblem


class Problems:
    """Thread-safe (the output pumps are threads): one entry per place, its last error and how often it failed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_where: dict[str, SupervisorProblem] = {}

    def record(self, where: str, exc: BaseException, consequence: str) -> None:
        with self._lock:
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
