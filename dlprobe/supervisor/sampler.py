"""Samples the memory of the whole training process tree from outside, at a cost it keeps bounded."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

import psutil

from dlprobe.rundir.schema import SAMPLE_GONE, SAMPLE_PROC, SAMPLE_READING
from dlprobe.system import cgroup, procmem

TICK_S = 0.25  # cheap readings (statm, /dev/shm, meminfo, cgroup) this often
# smaps_rollup walks page tables; a full round is repeated at most every MAX_FULL_S (so every worker's
# USS is read at least once a second) and no more often than keeps its cost near FULL_BUDGET of a core.
MIN_FULL_S = 0.5
MAX_FULL_S = 1.0
FULL_BUDGET = 0.04
# Walking the process table to find descendants costs more than everything else; workers are announced by
# the hooks' events at once, so the walk only catches the rest (forkserver, resource tracker) now and then.
DISCOVER_EVERY_S = 2.0
# The main process and helpers (forkserver, resource tracker) change slowly next to workers; reading their
# smaps_rollup on every third full round leaves the budget to the workers, whose growth is the story.
OTHERS_EVERY_N_ROUNDS = 3


class Sampler:
    """Discovers the target's descendants and writes one row of readings per tick to samples.jsonl."""

    def __init__(self, root_pid: int, out: IO[str], cgroup_dir: tuple[Path, Path, int] | None) -> None:
        self.root_pid = root_pid
        self.out = out
        self.cgroup_dir = cgroup_dir
        self.known: set[int] = set()
        self.gone: set[int] = set()
        self.full_interval = MIN_FULL_S
        self.next_full = 0.0
        self.last: dict[int, dict[str, int]] = {}
        self.last_system: dict[str, Any] = {}
        self.full_cost_s = 0.0
        self.next_discover = 0.0
        self.workers: set[int] = set()
        self.full_rounds = 0

    def _write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record, separators=(",", ":")) + "\n")

    def add_pid(self, pid: int, worker: bool = False) -> None:
        if worker:
            self.workers.add(pid)
        if pid in self.known:
            return
        self.known.add(pid)
        self.next_full = 0.0  # read a new process at once: a forked worker's USS starts climbing immediately
        try:
            proc = psutil.Process(pid)
            ppid: int | None = proc.ppid()
            started: float | None = proc.create_time()
        except psutil.Error:
            ppid = started = None
        self._write({"k": SAMPLE_PROC, "pid": pid, "ppid": ppid, "comm": procmem.read_comm(pid), "start": started})

    def discover(self) -> None:
        """Every descendant of the target: fork workers are children, forkserver ones grandchildren."""
        try:
            root = psutil.Process(self.root_pid)
            descendants = root.children(recursive=True)
        except psutil.Error:
            return
        self.add_pid(self.root_pid)
        for child in descendants:
            self.add_pid(child.pid)

    def tick(self, now: float) -> None:
        if now >= self.next_discover:
            self.discover()
            self.next_discover = now + DISCOVER_EVERY_S
        full = now >= self.next_full
        others_too = full and self.full_rounds % OTHERS_EVERY_N_ROUNDS == 0
        readings: dict[str, dict[str, int]] = {}
        start = time.perf_counter()
        for pid in sorted(self.known - self.gone):
            deep = full and (pid in self.workers or others_too)
            values = procmem.read_smaps_rollup(pid) if deep else None
            if values is None:
                rss = procmem.read_rss(pid)
                if rss is None:
                    self.gone.add(pid)
                    self._write({"k": SAMPLE_GONE, "pid": pid, "t": round(now, 3)})
                    continue
                values = {"rss": rss}
            readings[str(pid)] = values
            self.last[pid] = {**self.last.get(pid, {}), **values}
        if full:
            self.full_rounds += 1
            self.full_cost_s = time.perf_counter() - start
            self.full_interval = min(MAX_FULL_S, max(MIN_FULL_S, self.full_cost_s / FULL_BUDGET))
            self.next_full = now + self.full_interval
        row: dict[str, Any] = {"k": SAMPLE_READING, "t": round(now, 3), "p": readings}
        shm = procmem.shm_usage()
        if shm:
            row["shm"] = shm
        row["avail"] = procmem.system_memory()["available"]
        cg = cgroup.memory_state(self.cgroup_dir)
        if cg:
            row["cg"] = cg
        self.last_system = row
        self._write(row)
        self.out.flush()
