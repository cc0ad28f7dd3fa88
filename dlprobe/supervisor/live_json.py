"""`--log-to`: the run's latest per-process numbers in the run directory's live.json, replaced whole (atomic rename)
once a second, for the training process's sinks (in_training/sinks.py) to add to the script's own W&B or MLflow logs.

One source: the numbers are the Prometheus exporter's families (supervisor/prom/metrics.py), built from the same
readings, only keyed as a logging library wants them (`dlprobe/rank1/loader0/worker2/uss_bytes`) and grouped by
the training process that owns them, so each rank adds its own loaders' workers and nothing of another rank's."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from dlprobe import atomic
from dlprobe.rundir.schema import LIVE_FILE, LOG_TO_PREFIX
from dlprobe.supervisor.problems import Problems
from dlprobe.supervisor.prom.exporter import job_name
from dlprobe.supervisor.prom.exposition import Family
from dlprobe.supervisor.prom.metrics import JobLabels, LiveState, families

if TYPE_CHECKING:
    from dlprobe.supervisor.run_watch import Progress
    from dlprobe.supervisor.sampler import Sampler

# The sinks add the numbers at the script's own cadence; a second is finer than any logging cadence worth charting
# and costs the supervisor one small file a second.
REFRESH_S = 1.0
WHERE = f"{LIVE_FILE} write"
# A point in time is no curve to chart beside a loss: the last-batch and start timestamps stay Prometheus's.
SKIPPED_SUFFIX = "_timestamp_seconds"


class ProcessNumbers(TypedDict):
    rank: int | None
    values: dict[str, float]


class LiveRecord(TypedDict):
    """live.json: `processes` by training process pid (as text: JSON's keys), `node` what the whole host shares."""

    t: float
    processes: dict[str, ProcessNumbers]
    node: dict[str, float]


def _short(name: str, prefix: str, labels: dict[str, str]) -> str:
    """The family's name without its scope, its page kind put in: dlprobe_worker_pss_kind_bytes{kind=anon} ->
    pss_anon_bytes."""
    rest = name[len(prefix) :]
    kind = labels.get("kind", "")
    if kind:
        rest = rest.replace("_kind_", "_") if "_kind_" in rest else rest
        rest = rest.replace("_bytes", f"_{kind}_bytes") if rest.endswith("_bytes") else f"{rest}_{kind}"
    return rest


def live_record(fams: list[Family], worker_main: dict[int, int], now: float) -> LiveRecord:
    """The families' series as sink keys, per owning training process (a worker's is its main process's, from
    `worker_main`: worker pid -> main pid); series without a process are the node's."""
    processes: dict[str, ProcessNumbers] = {}
    node: dict[str, float] = {}
    for family in fams:
        if family.name.endswith(SKIPPED_SUFFIX):
            continue
        for labels, value in family.samples:
            pid = labels.get("pid", "")
            if family.name.startswith("dlprobe_worker_"):
                main = worker_main.get(int(pid)) if pid.isdigit() else None
                scope = f"loader{labels.get('loader', '')}/worker{labels.get('worker', '')}/"
                key = scope + _short(family.name, "dlprobe_worker_", labels)
            elif family.name.startswith("dlprobe_main_"):
                main = int(pid) if pid.isdigit() else None
                key = "main/" + _short(family.name, "dlprobe_main_", labels)
            elif family.name.startswith("dlprobe_loader_"):
                main = int(pid) if pid.isdigit() else None
                key = f"loader{labels.get('loader', '')}/" + _short(family.name, "dlprobe_loader_", labels)
            else:
                node[LOG_TO_PREFIX + "node/" + _short(family.name, "dlprobe_", labels)] = value
                continue
            if main is None:
                continue
            rank_text = labels.get("rank", "")
            rank = int(rank_text) if rank_text.lstrip("-").isdigit() else None
            entry = processes.setdefault(str(main), {"rank": rank, "values": {}})
            prefix = LOG_TO_PREFIX + (f"rank{rank}/" if rank is not None else "")
            entry["values"][prefix + key] = value
    return {"t": round(now, 3), "processes": processes, "node": node}


class LiveJson:
    """Writes live.json at REFRESH_S; a failure is a probe problem (the sinks then add older numbers, or none)."""

    def __init__(self, run_dir: Path, problems: Problems, started_at: float, target_pid: int) -> None:
        self.path = run_dir / LIVE_FILE
        self.problems = problems
        self.started_at = started_at
        self.target_pid = target_pid
        self.job = JobLabels(job_name(run_dir), platform.node())
        self.next_refresh = 0.0
        self.writes = 0

    def refresh(self, now: float, progress: Progress, sampler: Sampler, hangs: int, force: bool = False) -> None:
        if now < self.next_refresh and not force:
            return
        self.next_refresh = now + REFRESH_S
        try:
            state = LiveState(progress, sampler, self.target_pid, self.started_at, hangs, len(self.problems.as_list()))
            worker_main = {pid: main for pid, (main, _loader, _worker) in progress.workers.items()}
            data = json.dumps(live_record(families(self.job, state), worker_main, time.time()), separators=(",", ":"))
            atomic.write_bytes_atomic(self.path, data.encode())
            self.writes += 1
        except Exception as exc:  # a full disk, or a bug of ours: the sinks lack fresh numbers, the run goes on
            self.problems.record(WHERE, exc, "the W&B/MLflow logs (--log-to) carried older dlprobe numbers or none")
