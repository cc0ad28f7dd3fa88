"""A tune trial's workers' memory, read while the trial runs and projected to the end of an epoch as `run`'s advice
and tune's results project a worker (loader_model/memory_growth.py: what it held at its start, then its copies of the
parent's pages and its new allocations, each bent toward its ceiling): the per-worker figure behind the search's
memory cap, so the counts the search tries and the pick tune's results make agree.

Read from a thread of the training process: smaps_rollup walks page tables (34 ms of CPU for a 1 GiB worker here),
which the loop timing the trial must not wait for; the read itself releases the GIL. The thread reads less often
where a round costs more than MAX_CPU_SHARE of a core, and says what it spent (`cpu_s`), which the trial takes out of
the main process's CPU share: the probe's reads are not the loader's cost."""

from __future__ import annotations

import os
import threading
import time

from dlprobe.in_training import probe_errors
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
MAX_CPU_SHARE = 0.05  # of one core, for the reads: 8 workers of 1 GiB read every 0.2 s would take a whole core


def wait_after(round_cpu_s: float) -> float:
    """How long to wait after a round of reads that took `round_cpu_s` of CPU: READ_EVERY_S, or longer where the
    reads would take more than MAX_CPU_SHARE of a core."""
    return max(READ_EVERY_S, round_cpu_s / MAX_CPU_SHARE)


class TrialMemory:
    """Each worker's readings over a trial (perf_counter time, smaps_rollup), from the trial's first batch (`start`)
    until `stop`."""

    def __init__(self) -> None:
        self._readings: dict[int, list[tuple[float, dict[str, int]]]] = {}
        self._lock = threading.Lock()  # the thread appends while worker_bytes may read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unread: dict[int, str] = {}  # pid -> why it could not be read (recorded by stop(), on the main thread)
        self.cpu_s = 0.0  # the thread's own CPU so far
        self.parent_anon: Ceiling | None = None
        self.limit: Ceiling | None = None

    def start(self, pids: list[int]) -> None:
        """Read the parent (what a worker can copy at most) and the tightest limit, then each worker in turn, all in
        the thread: the trial's loop goes on at once."""
        self._thread = threading.Thread(target=self._run, args=(list(pids),), name="dlprobe-trial-memory", daemon=True)
        self._thread.start()

    def _run(self, pids: list[int]) -> None:
        began = time.thread_time()
        own, why = procmem.read_smaps_rollup_or_why(os.getpid())
        if own and own.get("anon"):
            self.parent_anon = Ceiling(own["anon"], "the parent's anonymous memory at fork")
        elif why:
            self._unread[os.getpid()] = why
        state = cgroup.memory_state(cgroup.memory_dir()) or {}
        machine = procmem.system_memory()
        self.limit = limit_ceiling(tightest_limit(state.get("limit"), machine["total"], machine["available"]))
        while True:
            round_began = time.thread_time()
            for pid in pids:
                reading, why = procmem.read_smaps_rollup_or_why(pid)
                if reading is not None:
                    self.add(pid, time.perf_counter(), reading)
                elif why:
                    self._unread.setdefault(pid, why)
            now = time.thread_time()
            self.cpu_s = now - began
            if self._stop.wait(wait_after(now - round_began)):
                return

    def add(self, pid: int, t: float, reading: dict[str, int]) -> None:
        """One reading of a worker (smaps_rollup's fields, procmem.parse_smaps_rollup) at time `t`."""
        with self._lock:
            self._readings.setdefault(pid, []).append((t, reading))

    def stop(self) -> None:
        """Stop reading (a read under way ends on its own: the readings are taken under the lock) and record each
        process that could not be read, once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        for pid, why in sorted(self._unread.items()):
            probe_errors.record("trial_memory.read", PermissionError(f"pid {pid}: {why}"),
                                "that process's memory in the trial is its USS at the trial's end")  # fmt: skip
        self._unread.clear()

    def worker_bytes(self, t0: float, last_batch: float, fraction: float, steady_from: float) -> int | None:
        """The largest worker's memory at the end of a full epoch (memory_growth.worker_end_bytes) on the trial's
        epoch clock (it began an epoch at `t0` and had done `fraction` of it at its `last_batch`, as tune's results
        read a trial), its steady part from `steady_from` (every worker had built its first batch by then). None where
        no worker was read."""
        self.stop()
        share_at = linear_clock(t0, last_batch, fraction)
        with self._lock:
            workers = [list(readings) for readings in self._readings.values()]
        out: int | None = None
        for readings in workers:
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
