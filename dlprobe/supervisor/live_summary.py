"""`dlprobe run --log-to wandb|mlflow`: the supervisor's latest readings of every training process, loader and worker
running now, written whole to the run directory's live_summary.json at the exporter's cadence, for the training
process to log into the script's own run (in_training/sinks.py). The same readings the Prometheus exposition is
built from (supervisor/prom/metrics.py), and bounded the same way: a worker that has exited is dropped, only each
process's most recent loaders are kept. Nothing here may stop the run: a failed write is a probe problem and the next
refresh tries again."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from dlprobe import atomic
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    LIVE_SUMMARY_FILE,
    LIVE_WAIT_WINDOW_S,
    SAMPLE_FDS,
    LiveLoader,
    LiveProcess,
    LiveSummary,
    LiveWorker,
)
from dlprobe.supervisor.problems import Problems
from dlprobe.supervisor.prom.metrics import MAX_LOADERS_PER_PROCESS
from dlprobe.supervisor.sampler import ROUND_S

if TYPE_CHECKING:
    from dlprobe.supervisor.run_watch import LoaderKey, Progress
    from dlprobe.supervisor.sampler import Sampler

REFRESH_S = ROUND_S  # as often as a moving worker's smaps_rollup is read: more often would repeat it
WHERE = f"{LIVE_SUMMARY_FILE} write"


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class WaitWindows:
    """Each loader's recent (batches event time, total wait so far): the share of the last LIVE_WAIT_WINDOW_S of the
    loop's time it spent waiting for data. The waits a batches event carries happened since the one before it, so
    the difference of two totals over the difference of their times is the share between them."""

    def __init__(self) -> None:
        self.points: dict[LoaderKey, deque[tuple[float, float]]] = {}

    def share(self, key: LoaderKey, at: float | None, total_wait: float) -> float | None:
        if at is None:
            return None
        points = self.points.setdefault(key, deque())
        if not points or points[-1][0] != at:
            points.append((at, total_wait))
        while len(points) > 2 and at - points[1][0] >= LIVE_WAIT_WINDOW_S:
            points.popleft()
        if len(points) < 2:
            return None
        first_at, first_wait = points[0]
        span = at - first_at
        if span <= 0:
            return None
        return round(min(1.0, max(0.0, (total_wait - first_wait) / span)), 4)

    def keep_only(self, keys: set[LoaderKey]) -> None:
        for key in list(self.points):
            if key not in keys:
                del self.points[key]


def build(progress: Progress, sampler: Sampler, target_pid: int, now: float, windows: WaitWindows) -> LiveSummary:
    """The summary of what is running now (pure but for `windows`, which keeps each loader's recent waits)."""
    live = sampler.known - sampler.gone
    workers: dict[LoaderKey, list[LiveWorker]] = {}
    for pid, (main_pid, loader, worker_id) in sorted(progress.workers.items()):
        if pid not in live:
            continue
        reading = sampler.last.get(pid, {})
        workers.setdefault((main_pid, loader), []).append(
            {
                "worker": worker_id,
                "pid": pid,
                "uss": _int(reading.get("uss")),
                "pss": _int(reading.get("pss")),
                "pss_anon": _int(reading.get("pss_anon")),
                "pss_file": _int(reading.get("pss_file")),
                "pss_shmem": _int(reading.get("pss_shmem")),
                "rss": _int(reading.get("rss")),
                "fds": _int(reading.get(SAMPLE_FDS)),
            }
        )
    loaders: dict[int, list[int]] = {}
    for main_pid, loader in set(progress.batches) | set(workers):
        loaders.setdefault(main_pid, []).append(loader)
    kept: set[LoaderKey] = set()
    processes: list[LiveProcess] = []
    for pid in progress.mains(target_pid):
        if pid not in live:
            continue
        reading = sampler.last.get(pid, {})
        rows: list[LiveLoader] = []
        for loader in sorted(loaders.get(pid, []))[-MAX_LOADERS_PER_PROCESS:]:
            key = (pid, loader)
            kept.add(key)
            wait = round(progress.wait_s.get(key, 0.0), 6)
            rows.append(
                {
                    "loader": loader,
                    "batches": progress.batches.get(key, 0),
                    "data_wait_s": wait,
                    "data_wait_share": windows.share(key, progress.last_batch_at.get(key), wait),
                    "workers": workers.get(key, []),
                }
            )
        processes.append(
            {
                "pid": pid,
                "rank": progress.ranks.get(pid),
                "uss": _int(reading.get("uss")),
                "pss": _int(reading.get("pss")),
                "rss": _int(reading.get("rss")),
                "loaders": rows,
            }
        )
    windows.keep_only(kept)
    shm = sampler.last_system.get("shm") or {}
    return {
        "t": round(now, 3),
        "shm_used": _int(shm.get("used")),
        "shm_total": _int(shm.get("total")),
        "processes": processes,
    }


class LiveSummaryWriter:
    def __init__(self, run_dir: Path, problems: Problems, target_pid: int) -> None:
        self.path = RunDir(run_dir).live_summary
        self.problems = problems
        self.target_pid = target_pid
        self.windows = WaitWindows()
        self.next_refresh = 0.0

    def refresh(self, now: float, progress: Progress, sampler: Sampler) -> None:
        if now < self.next_refresh:
            return
        self.next_refresh = now + REFRESH_S
        try:
            summary = build(progress, sampler, self.target_pid, now, self.windows)
            data = json.dumps(summary, separators=(",", ":")).encode()
        except Exception as exc:  # a bug of the summary's costs the logging, never the run
            self.problems.record(WHERE, exc, "the numbers --log-to logs were not updated")
            return
        try:
            atomic.write_bytes_atomic(self.path, data)  # a reader never sees half a file
        except OSError as exc:  # a full or read-only disk: tried again at the next refresh
            self.problems.record(WHERE, exc, "the numbers --log-to logs kept older values or none")
