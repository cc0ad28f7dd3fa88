"""What memory.png draws, taken from the loaded run (and, in a job, the report's ranks and node totals): every
shown process's full series, /dev/shm, the node's total; `render/plot.py` draws it without the run."""

from __future__ import annotations

from typing import TypedDict

from dlprobe.analysis.report.schema import NodeEntry, Report
from dlprobe.analysis.report.timeline import rank_labels
from dlprobe.analysis.run.labels import legend_name
from dlprobe.analysis.run.model import RunData

Points = list[tuple[float, int]]  # (seconds since the epoch, bytes), as sampled


class PlotProcess(TypedDict):
    pid: int
    role: str
    label: str  # "L0 worker 1 (pid)", "main (pid)"; in a job "rank 1 L0 worker 0 (pid)"
    uss: Points
    rss: Points
    pss_anon: Points
    pss_file: Points
    pss_shmem: Points


class MemoryPlot(TypedDict):
    script: str
    t0: float
    processes: list[PlotProcess]  # in drawing order
    shm_t: list[float]
    shm_used: list[int | None]
    shm_total: int | None
    node: NodeEntry | None  # the job report's node entry of this run directory (pss_total, memory_limit)
    cgroup_limit: int | None  # the memory limit the kernel enforces on the run's cgroup: no USS is drawn above it


def memory_plot(run: RunData, report: Report | None = None) -> MemoryPlot:
    """The plot's data: the ranks and their workers in a job (labelled by rank), else the main processes and
    workers."""
    order = {"main": 0, "worker": 1}
    procs = sorted(run.processes, key=lambda p: (order.get(p.role, 2), p.loader_id or 0, p.worker_id or 0))
    ranks = rank_labels(report)
    shown = [p for p in procs if p.pid in ranks] if ranks else [p for p in procs if p.role in ("main", "worker")]
    nodes = report["job"]["nodes"] if report and "job" in report else []
    return {
        "script": str(run.meta.get("script", "")),
        "t0": run.meta.get("started_at") or (run.system.t[0] if run.system.t else 0.0),
        "processes": [
            {
                "pid": p.pid,
                "role": p.role,
                "label": ranks.get(p.pid) or legend_name(p.role, p.pid, p.loader_id, p.worker_id, p.comm),
                "uss": p.series.values("uss"),
                "rss": p.series.values("rss"),
                "pss_anon": p.series.values("pss_anon"),
                "pss_file": p.series.values("pss_file"),
                "pss_shmem": p.series.values("pss_shmem"),
            }
            for p in shown
        ],
        "shm_t": run.system.t,
        "shm_used": run.system.shm_used,
        "shm_total": run.system.shm_total,
        "node": next((n for n in nodes if n["run_dir"] == str(run.path)), None),
        "cgroup_limit": run.system.cgroup_limit,
    }
