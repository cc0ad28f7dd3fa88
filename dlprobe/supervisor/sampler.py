"""Samples the memory of the whole training process tree from outside, at a cost it keeps bounded."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from dlprobe.rundir.schema import (
    SAMPLE_CPU,
    SAMPLE_FD_TARGETS,
    SAMPLE_FDS,
    SAMPLE_GONE,
    SAMPLE_PROC,
    SAMPLE_READ_AT,
    SAMPLE_READING,
    SAMPLE_RUN_DELAY,
    SAMPLE_THREAD,
    SAMPLE_UNREAD,
)
from dlprobe.supervisor.budget import CpuBudget
from dlprobe.supervisor.sample_thinning import ReadingThinner
from dlprobe.system import cgroup, procfds, procmem
from dlprobe.system.proc_files import ProcFiles
from dlprobe.system.proctree import alive, descendant_pids

TICK_S = 0.25  # cheap readings (/proc/PID/stat, /dev/shm, meminfo, cgroup) this often
# smaps_rollup walks the target's page tables under its memory-map lock (milliseconds of CPU per process, and a
# worker faulting meanwhile waits), so it is read only where the cheap readings say memory can have moved: RSS or
# the page-fault count changed by MOVE_BYTES since the process's last full read. A moving process is read every
# ROUND_S at most; a still one once every MAX_STALE_S, so slow changes (a parent's writes turning shared pages
# into a worker's private ones) still show.
ROUND_S = 0.5
MAX_STALE_S = 5.0
# With many processes that bound alone costs more than the whole budget (64 torch-sized processes, ~2 ms of CPU per
# read, every 5 s: 2.6% of a core), so it stretches with the number watched and the measured cost of a read, to
# keep the still processes' reads within STALE_SHARE of one core; never past MAX_STALE_CAP_S.
STALE_SHARE = 0.01
MAX_STALE_CAP_S = 30.0
MOVE_BYTES = 1 << 20
# A process whose RSS grew by this much (or by a tenth, if that is more) since its last full read is read whatever
# the budget says: a growing worker is the one the OOM killer takes, and one that exits at the end of an epoch
# takes its last growth with it. Net growth, not churn: allocating and freeing a batch moves RSS both ways.
GROWTH_BYTES = 32 << 20
# A moving process whose full read found its memory within SETTLED_BYTES of where the last one left it (churn: a
# batch allocated and freed between two reads faults as many pages as a copy would) waits BACKOFF_FACTOR times
# longer for its next moving read, up to the stale bound; one whose memory moved more is back to ROUND_S.
# benchmarks/probe_overhead.py's 8 workers sort arrays: each faults past MOVE_BYTES every ~2 s while its USS moves
# 2 MiB over the whole run, so they were read as often as a worker copying its parent's pages.
BACKOFF_FACTOR = 2.0
SETTLED_BYTES = 4 * MOVE_BYTES
DEEP_MOVES = ("rss", "uss", "anon", "private_dirty")  # the values whose move resets the interval
FIRST_READ_COST_S = 0.004  # CPU seconds per smaps_rollup of a ~200 MB process, until measured on this run
# Walking the process table to find descendants costs more than everything else; workers are announced by
# the hooks' events at once, so the walk only catches the rest (forkserver, resource tracker) now and then.
DISCOVER_EVERY_S = 2.0
# Open descriptors (one getdents of /proc/PID/fd: ~15 us of CPU for a few dozen, ~0.3 ms for a leaking worker's
# hundreds) are counted this often per process, the interval stretched so all processes' counts stay within FD_SHARE
# of a core. A count FD_CLIMB above the process's first, and at least double the count at the last reading of the
# targets, has its targets read (a readlink each, bounded): where a leak's descriptors point is known before the
# process dies of it. A process's first FD_YOUNG_S seconds, and a climbing count within two readings of its limit, are
# read every tick instead: a worker that opens files per sample under a low limit (worker_init_fn's setrlimit) can
# reach it a second after it starts, between two regular readings, and its few descriptors cost microseconds to count.
FD_EVERY_S = 1.0
FD_YOUNG_S = 5.0
FD_SHARE = 0.002
FD_CLIMB = 64
FIRST_FD_COST_S = 0.00005


def stale_bound(processes: int, cost_s: float) -> float:
    """Seconds a still process may go without a smaps_rollup: MAX_STALE_S, longer when reading every process that
    often would take more than STALE_SHARE of a core, at most MAX_STALE_CAP_S."""
    return min(MAX_STALE_CAP_S, max(MAX_STALE_S, processes * cost_s / STALE_SHARE))


@dataclass(frozen=True)
class FullRead:
    """What the cheap readings said when a process's smaps_rollup was last read."""

    t: float
    rss: int
    faults: int
    interval: float = ROUND_S  # the soonest a moving process is read again (BACKOFF_FACTOR)


def choose_full_reads(
    now: float,
    cheap: dict[int, tuple[int, int]],
    last_full: dict[int, FullRead],
    allowance_s: float,
    cost_s: float,
    stale_s: float = MAX_STALE_S,
) -> tuple[list[int], int]:
    """Which processes get a smaps_rollup this round, and how many that moved were left out for the CPU budget.

    `cheap` is (rss, page faults) per live pid now. New, stale and growing processes are always read (the budget
    never buys blindness past `stale_s` (stale_bound), nor past GROWTH_BYTES of growth); other moving ones are read
    once their FullRead.interval has passed, while `allowance_s` lasts, the most moved first; still ones wait for
    `stale_s`.
    """
    due: list[int] = []
    moving: list[tuple[int, int]] = []
    for pid, (rss, faults) in cheap.items():
        last = last_full.get(pid)
        if last is None or now - last.t >= stale_s or rss - last.rss >= max(GROWTH_BYTES, last.rss // 10):
            due.append(pid)
            continue
        moved = max(abs(rss - last.rss), (faults - last.faults) * procmem.PAGE_SIZE)
        if moved >= MOVE_BYTES and now - last.t >= last.interval:
            moving.append((moved, pid))
    moving.sort(key=lambda m: (-m[0], m[1]))
    room = allowance_s - cost_s * len(due)
    affordable = len(moving) if cost_s <= 0 or room >= cost_s * len(moving) else max(0, int(room / cost_s))
    return sorted(due + [pid for _, pid in moving[:affordable]]), len(moving) - affordable


class Sampler:
    """Discovers the target's descendants and writes one row of readings per tick to samples.jsonl."""

    def __init__(
        self,
        root_pid: int,
        out: IO[str],
        cgroup_dir: tuple[Path, Path, int] | None,
        budget: CpuBudget | None = None,
        keep_open: bool = True,
    ) -> None:
        self.root_pid = root_pid
        self.out = out
        self.cgroup_dir = cgroup_dir
        self.budget = budget  # None (in-process use): no cap, the process's CPU time is the training's own
        self.known: set[int] = set()
        self.gone: set[int] = set()
        self.next_full = 0.0
        self.last: dict[int, dict[str, Any]] = {}
        self.last_full: dict[int, FullRead] = {}
        self.last_deep: dict[int, dict[str, int]] = {}  # each process's last smaps_rollup values
        self.last_system: dict[str, Any] = {}
        self.read_cost_s = FIRST_READ_COST_S
        self.full_reads = 0
        self.next_discover = 0.0
        self.workers: set[int] = set()
        self.created: dict[int, float | None] = {}  # psutil's create_time: tells a process from a reused pid
        self.threads: dict[int, int] = {}  # worker threads (worker_method="thread"): tid -> the pid they run in
        # keep_open=False inside a training process (dlprobe.watch): its forked workers would inherit the descriptors
        self.files = ProcFiles(keep_open)
        self.stale_s = MAX_STALE_S
        self.next_fds = 0.0
        self.fd_cost_s = FIRST_FD_COST_S
        self.fd_seen: dict[int, float] = {}  # when each process's descriptors were first counted
        self.fd_last: dict[int, tuple[float, int]] = {}  # each process's last count, and when
        self.fd_limits: dict[int, int] = {}  # RLIMIT_NOFILE as last read (at discovery, or with the targets)
        self.first_fds: dict[int, int] = {}  # each process's first descriptor count
        self.fds_at_targets: dict[int, int] = {}  # the count when its targets were last read
        self.unread: dict[int, str] = {}  # processes whose smaps_rollup was refused, and why
        self.out_error: OSError | None = None  # the write that stopped samples.jsonl (a full disk), and when
        self.out_stopped_at: float | None = None
        self.thinner = ReadingThinner()  # past the first hour, the readings written are downsampled

    def _next_interval(self, pid: int, values: dict[str, int]) -> float:
        """How soon a moving process is read again: ROUND_S after a read that found its memory moved by SETTLED_BYTES
        (or its first), BACKOFF_FACTOR times longer after one that found it about where the last read left it, at most
        the stale bound."""
        before, last = self.last_deep.get(pid), self.last_full.get(pid)
        if before is None or last is None:
            return ROUND_S
        # Not PSS: it moves when the processes sharing a page change (a sibling touching it), not this one's memory.
        if any(abs(values.get(key, 0) - before.get(key, 0)) >= SETTLED_BYTES for key in DEEP_MOVES):
            return ROUND_S
        return min(self.stale_s, last.interval * BACKOFF_FACTOR)

    def close(self) -> None:
        """Write the readings still held for downsampling, and close the /proc descriptors kept open between ticks."""
        for kept in self.thinner.rest():  # the run's last readings, whole
            self._write(kept)
        self._flush()
        self.files.close()

    def _write(self, record: dict[str, Any]) -> None:
        # A full or read-only disk stops the recording, never the run: the readings go on (the live view, the hang
        # guard), the caller says where the samples stop (`out_error`, `out_stopped_at`).
        if self.out_error is not None:
            return
        try:
            self.out.write(json.dumps(record, separators=(",", ":")) + "\n")
        except OSError as exc:
            self._stop_writing(exc)

    def _flush(self) -> None:
        if self.out_error is not None:
            return
        try:
            self.out.flush()
        except OSError as exc:
            self._stop_writing(exc)

    def _stop_writing(self, exc: OSError) -> None:
        self.out_error = exc.with_traceback(None)
        self.out_stopped_at = time.time()

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
        self.created[pid] = started
        record = {"k": SAMPLE_PROC, "pid": pid, "ppid": ppid, "comm": procmem.read_comm(pid), "start": started}
        limit = procfds.nofile_limit(pid)
        if limit:
            self.fd_limits[pid] = limit
        self._write({**record, "nofile": limit})

    def add_thread(self, pid: int, tid: int) -> None:
        """A DataLoader worker that is a thread of `pid`: its CPU time is read each tick (it has no memory of its
        own to read, and no exit of its own to record: it ends when its iterator does)."""
        if tid in self.threads:
            return
        self.threads[tid] = pid
        self._write({"k": SAMPLE_THREAD, "pid": pid, "tid": tid, "comm": procmem.read_comm(pid, tid)})

    def _fd_counts(self, now: float, pids: list[int]) -> dict[int, int]:
        """Each live process's open-descriptor count: every FD_EVERY_S (stretched to keep within FD_SHARE of a core),
        every tick for the processes `_fd_urgent` names; a count that climbed has its targets written too."""
        regular = now >= self.next_fds
        due = pids if regular else [pid for pid in pids if self._fd_urgent(now, pid)]
        if not due:
            return {}
        counts: dict[int, int] = {}
        started = time.thread_time()
        for pid in due:
            self.fd_seen.setdefault(pid, now)  # young from the first try: one whose fds cannot be read ages too
            count = procfds.fd_count(pid)
            if count is not None:
                counts[pid] = count
        self.fd_cost_s = 0.8 * self.fd_cost_s + 0.2 * (time.thread_time() - started) / len(due)
        if regular:
            self.next_fds = now + max(FD_EVERY_S, len(pids) * self.fd_cost_s / FD_SHARE)
        for pid, count in counts.items():
            self.fd_last[pid] = (now, count)
            first = self.first_fds.setdefault(pid, count)
            # The first climb is read at once (a worker at its limit may live a second more), then each doubling.
            read_at = self.fds_at_targets.get(pid)
            if count >= first + FD_CLIMB and (read_at is None or count >= 2 * read_at):
                self._fd_targets(now, pid, count)
        return counts

    def _fd_urgent(self, now: float, pid: int) -> bool:
        """Whether the process's descriptors are counted this tick, between regular readings: in its first
        FD_YOUNG_S, or while its count has climbed to within two regular intervals of its limit at the rate read."""
        seen = self.fd_seen.get(pid)
        if seen is None or now - seen < FD_YOUNG_S:
            return True
        last = self.fd_last.get(pid)
        limit = self.fd_limits.get(pid)
        first = self.first_fds.get(pid)
        if last is None or not limit or first is None or last[1] <= first or last[0] <= seen:
            return False
        rate = (last[1] - first) / (last[0] - seen)
        return limit - last[1] <= rate * 2 * FD_EVERY_S

    def _fd_targets(self, now: float, pid: int, count: int) -> None:
        top = procfds.fd_target_patterns(pid)
        if top is None:
            return
        self.fds_at_targets[pid] = count
        # The limit is read again with them: a worker_init_fn (or the dataset) may have set its own after the fork.
        limit = procfds.nofile_limit(pid)
        if limit:
            self.fd_limits[pid] = limit
        self._write({"k": SAMPLE_FD_TARGETS, "pid": pid, "t": round(now, 3), "n": count,
                     "top": [[pattern, n] for pattern, n in top], "nofile": limit})  # fmt: skip

    def _thread_readings(self) -> dict[str, dict[str, float | None]]:
        readings: dict[str, dict[str, float | None]] = {}
        for tid, pid in list(self.threads.items()):
            cpu = procmem.read_thread_cpu(pid, tid)
            if cpu is None:
                del self.threads[tid]  # ended with its iterator: nothing more to read
                continue
            readings[str(tid)] = {SAMPLE_CPU: round(cpu[0], 2), SAMPLE_RUN_DELAY: cpu[1] and round(cpu[1], 3)}
        return readings

    def live_workers(self) -> list[psutil.Process]:
        """The DataLoader workers of the job still running (never a later process that reused one's pid)."""
        live = []
        for pid in sorted(self.workers - self.gone):
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == self.created.get(pid) and alive(proc):
                    live.append(proc)
            except psutil.Error:  # noqa: S112 - exited: not live
                continue
        return live

    def discover(self) -> None:
        """Every descendant of the target: fork workers are children, forkserver ones grandchildren."""
        pids = descendant_pids(self.root_pid)
        if pids is None:
            try:
                pids = [child.pid for child in psutil.Process(self.root_pid).children(recursive=True)]
            except psutil.Error:
                return
        self.add_pid(self.root_pid)
        for pid in pids:
            self.add_pid(pid)

    def _ended(self, pid: int, now: float) -> None:
        """Record that `pid` ended (or began to die) by the tick stamped `now`, and forget what is kept for it."""
        self.gone.add(pid)
        self.files.forget(pid)
        for schedule in (self.fd_seen, self.fd_last, self.fd_limits, self.first_fds, self.fds_at_targets):
            schedule.pop(pid, None)
        for kept in self.thinner.process_ended():  # the readings before a death are written whole, first
            self._write(kept)
        self._write({"k": SAMPLE_GONE, "pid": pid, "t": round(now, 3)})

    def _recheck_parents(self, now: float, cheap: dict[int, tuple[int, int]]) -> None:
        """The workers' smaps are read after every process's stat, and on a busy machine that can be a second later: a
        training process killed in between leaves its pages to the workers, whose readings would be stamped as taken
        while it lived and read as copy-on-write. The processes that are not workers (the training process, a
        forkserver, an agent: a few) are read again once the workers are; one dying by now ended within this tick, so
        this tick's worker readings are teardown (analysis/run/teardown.py cuts them)."""
        for pid in sorted(cheap):
            if pid not in self.workers and pid not in self.gone and self.files.stat(pid) is None:
                self._ended(pid, now)

    def tick(self, now: float) -> None:
        began = time.monotonic()  # `now` is the round's stamp; each full read says how long after it it ended
        if now >= self.next_discover:
            self.discover()
            self.next_discover = now + DISCOVER_EVERY_S
        cheap: dict[int, tuple[int, int]] = {}
        cpu: dict[int, dict[str, float]] = {}
        for pid in sorted(self.known - self.gone):
            stat = self.files.stat(pid)
            if stat is None:
                self._ended(pid, now)
                continue
            cheap[pid] = stat[:2]
            # Whether a worker computes or waits (for a read, or for a core): the analysis divides by wall time.
            cpu[pid] = {SAMPLE_CPU: round(stat[2], 2)}
            delay = self.files.run_delay(pid)
            if delay is not None:
                cpu[pid][SAMPLE_RUN_DELAY] = round(delay, 3)
        chosen: set[int] = set()
        if now >= self.next_full:
            allowance = self.budget.allowance() if self.budget is not None else float("inf")
            self.stale_s = stale_bound(len(cheap), self.read_cost_s)
            picked, skipped = choose_full_reads(now, cheap, self.last_full, allowance, self.read_cost_s, self.stale_s)
            chosen = set(picked)
            if self.budget is not None:
                self.budget.note_skipped(skipped)
            self.next_full = now + ROUND_S
        fds = self._fd_counts(now, list(cheap))
        readings: dict[str, dict[str, Any]] = {}
        for pid, (rss, faults) in cheap.items():
            values = None
            if pid in chosen:
                started = time.thread_time()
                values, why = procmem.read_smaps_rollup_or_why(pid)
                if why is not None and pid not in self.unread:  # said once: the report names it, never a silent gap
                    self.unread[pid] = why
                    self._write({"k": SAMPLE_UNREAD, "pid": pid, "t": round(now, 3), "error": why})
                # CPU, not wall time: waiting for a busy target's memory-map lock costs the supervisor nothing.
                self.read_cost_s = 0.8 * self.read_cost_s + 0.2 * (time.thread_time() - started)
                if values is not None:
                    self.full_reads += 1
                    self.last_full[pid] = FullRead(now, rss, faults, self._next_interval(pid, values))
                    self.last_deep[pid] = values
            readings[str(pid)] = {**(values if values is not None else {"rss": rss}), **cpu[pid]}
            if values is not None:
                readings[str(pid)][SAMPLE_READ_AT] = round(time.monotonic() - began, 3)
            if pid in fds:
                readings[str(pid)][SAMPLE_FDS] = fds[pid]
            self.last[pid] = {**self.last.get(pid, {}), **readings[str(pid)]}
        if chosen:
            self._recheck_parents(now, cheap)
        row: dict[str, Any] = {"k": SAMPLE_READING, "t": round(now, 3), "p": readings}
        if self.threads:
            row["th"] = self._thread_readings()
        shm = procmem.shm_usage()
        if shm:
            row["shm"] = shm
        row["avail"] = procmem.system_memory()["available"]
        cg = cgroup.memory_state(self.cgroup_dir)
        if cg:
            if chosen and cg.get("limit"):  # memory.stat costs more than memory.current: only with the USS reads
                cg["cache"] = cgroup.reclaimable_cache(self.cgroup_dir)
            row["cg"] = cg
        self.last_system = row
        for kept in self.thinner.add(row):
            self._write(kept)
        self._flush()
