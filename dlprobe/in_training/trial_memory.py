"""A tune trial's workers' memory, read while the trial runs and projected to the end of an epoch as `run`'s advice
and tune's results project a worker (loader_model/memory_growth.py: what it held at its start, then its copies of the
parent's pages and its new allocations, each bent toward its ceiling): the per-worker figure behind the search's
memory cap, so the counts the search tries and the pick tune's results make agree.

Read from a thread of the training process: smaps_rollup walks page tables (milliseconds on a big worker), which the
loop timing the trial must not wait for; the read itself releases the GIL."""

from __future__ import annotations

import os
import threading
import time

from dlprobe.loader_model.memory_growth import (
    Ceiling,
    limit_ceiling,
    linear_clock,
    project_worker_by_kind,
    project_worker_uss,
    tightest_limit,
    worker_end_bytes,
)
from dlprobe.system import cgroup, procmem

READ_EVERY_S = 0.2  # a trial lasts 1.5 s or more: enough readings to fit a bend (memory_growth.MIN_READINGS)


class TrialMemory:
    """Each worker's readings over a trial (perf_counter time, smaps_rollup), from the trial's first batch (`start`)
    until `stop`."""

    def __init__(self) -> None:
        self._readings: dict[int, list[tuple[float, dict[str, int]]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.parent_anon: Ceiling | None = None
        self.limit: Ceiling | None = None

    def start(self, pids: list[int]) -> None:
        """Read the parent (what a worker can copy at most) and the tightest limit now, then each worker in turn."""
        own = procmem.read_smaps_rollup(os.getpid()) or {}
        if own.get("anon"):
            self.parent_anon = Ceiling(own["anon"], "the parent's anonymous memory at fork")
        state = cgroup.memory_state(cgroup.memory_dir()) or {}
        machine = procmem.system_memory()
        self.limit = limit_ceiling(tightest_limit(state.get("limit"), machine["total"], machine["available"]))
        self._thread = threading.Thread(target=self._run, args=(list(pids),), name="dlprobe-trial-memory", daemon=True)
        self._thread.start()

    def _run(self, pids: list[int]) -> None:
        while True:
            for pid in pids:
                reading = procmem.read_smaps_rollup(pid)
                if reading is not None:
                    self.add(pid, time.perf_counter(), reading)
            if self._stop.wait(READ_EVERY_S):
                return

    def add(self, pid: int, t: float, reading: dict[str, int]) -> None:
        """One reading of a worker (smaps_rollup's fields, procmem.parse_smaps_rollup) at time `t`."""
        self._readings.setdefault(pid, []).append((t, reading))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def worker_bytes(self, t0: float, last_batch: float, fraction: float, steady_from: float) -> int | None:
        """The largest worker's memory at the end of a full epoch (memory_growth.worker_end_bytes) on the trial's
        epoch clock (it began an epoch at `t0` and had done `fraction` of it at its `last_batch`, as tune's results
        read a trial), its steady part from `steady_from` (every worker had built its first batch by then). None where
        no worker was read."""
        self.stop()
        share_at = linear_clock(t0, last_batch, fraction)
        out: int | None = None
        for readings in self._readings.values():
            if not readings:
                continue
            start = next((i for i, (t, _) in enumerate(readings) if t >= steady_from), len(readings) - 1)
            uss = [r["uss"] for _, r in readings]
            kinds = [(share_at(t), r["private_dirty"], r["anon"], r.get("pss_shmem", 0), r.get("pss_file", 0))
                     for t, r in readings if "private_dirty" in r and "anon" in r]  # fmt: skip
            if len(kinds) == len(readings) and len(kinds) >= 2:
                model = project_worker_by_kind(kinds, start, fraction, self.parent_anon, self.limit)
            else:
                model = project_worker_uss([(share_at(t), v) for (t, _), v in zip(readings, uss, strict=True)], start,
                                           fraction, self.limit)  # fmt: skip
            end = worker_end_bytes(uss[0], max(uss), model)
            out = end if out is None else max(out, end)
        return out
