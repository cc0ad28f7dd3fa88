"""The memory plot: USS (solid) and RSS (dotted) of every process, each worker's PSS by kind of page, /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dlprobe.analysis.model import RunData, load_run
from dlprobe.rundir.files import read_json
from dlprobe.rundir.schema import PLOT_ERROR_FILE, PLOT_FILE, PLOT_PARTIAL_FILE, REPORT_FILE

MiB = 1024 * 1024


def _label(proc: object) -> str:
    role = getattr(proc, "role", "")
    if role == "worker":
        return f"L{proc.loader_id} worker {proc.worker_id} ({proc.pid})"  # type: ignore[attr-defined]
    if role == "main":
        return f"main ({proc.pid})"  # type: ignore[attr-defined]
    return f"{getattr(proc, 'comm', None) or 'other'} ({proc.pid})"  # type: ignore[attr-defined]


KIND_STYLES = (("pss_anon", "-", "anon"), ("pss_file", "--", "file"), ("pss_shmem", "-.", "shm"))


def _plot_kinds(ax: object, proc: object, t0: float, color: str) -> None:
    for metric, style, _name in KIND_STYLES:
        values = proc.series.values(metric)  # type: ignore[attr-defined]
        if values:
            ax.plot(  # type: ignore[attr-defined]
                [t - t0 for t, _ in values], [v / MiB for _, v in values], color=color, linestyle=style
            )


def rank_labels(report: dict[str, Any] | None) -> dict[int, str]:
    """In a job: each rank's and worker's pid -> "rank 1 worker 0 (pid)", from the report's processes."""
    if not report or len(report.get("ranks") or []) < 2:
        return {}
    labels = {}
    for proc in report.get("processes") or []:
        if proc.get("rank") and proc.get("role") in ("main", "worker"):
            what = "main" if proc["role"] == "main" else f"L{proc.get('loader_id')} worker {proc.get('worker_id')}"
            labels[int(proc["pid"])] = f"{proc['rank']} {what} ({proc['pid']})"
    return labels


def _plot_node_total(ax: Any, run: RunData, report: dict[str, Any] | None, t0: float) -> None:
    """A job's node total (every process of the tree: what the OOM killer sees), and its limit when near it."""
    node = next((n for n in (report or {}).get("job", {}).get("nodes", []) if n.get("run_dir") == str(run.path)), None)
    if node is None or not (node.get("pss_total") or {}).get("t"):
        return
    series = node["pss_total"]
    totals = [v / MiB for v in series["bytes"]]
    ax.plot([t - t0 for t in series["t"]], totals, color="black", linewidth=2, label="node total PSS")
    limit = node.get("memory_limit")
    if limit and max(totals) > 0.25 * limit / MiB:
        ax.axhline(
            limit / MiB, color="tab:red", linestyle="--", label=f"memory limit ({node.get('memory_limit_kind')})"
        )


def plot_memory(run: RunData, path: Path, report: dict[str, Any] | None = None) -> Path:
    """Write the PNG and return its path; matplotlib is imported only here, so the probe stays light. With a job's
    report, processes are labelled by rank and the node's total is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = run.meta.get("started_at") or (run.system.t[0] if run.system.t else 0.0)
    order = {"main": 0, "worker": 1}
    procs = sorted(run.processes, key=lambda p: (order.get(p.role, 2), p.loader_id or 0, p.worker_id or 0))
    ranks = rank_labels(report)
    shown = [p for p in procs if p.pid in ranks] if ranks else [p for p in procs if p.role in ("main", "worker")]
    # Runs recorded before dlprobe read memory by kind of page keep the two-panel plot.
    with_kinds = any(p.role == "worker" and p.series.values("pss_anon") for p in shown)
    if with_kinds:
        fig, (ax_mem, ax_kind, ax_shm) = plt.subplots(
            3, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1]}
        )
    else:
        fig, (ax_mem, ax_shm) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, proc in enumerate(shown):
        color = colors[i % len(colors)]
        if with_kinds and proc.role == "worker":
            _plot_kinds(ax_kind, proc, t0, color)
        uss = proc.series.values("uss")
        rss = proc.series.values("rss")
        if uss:
            label = ranks.get(proc.pid) or _label(proc)
            ax_mem.plot([t - t0 for t, _ in uss], [v / MiB for _, v in uss], color=color, label=f"{label} USS")
        if rss:
            ax_mem.plot([t - t0 for t, _ in rss], [v / MiB for _, v in rss], color=color, linestyle=":", alpha=0.7)
    _plot_node_total(ax_mem, run, report, t0)
    ax_mem.set_ylabel("MiB (solid USS, dotted RSS)")
    ax_mem.set_title(f"dlprobe: memory per process, {run.meta.get('script', '')}")
    ax_mem.grid(alpha=0.3)
    if ax_mem.lines:
        ax_mem.legend(fontsize=8, loc="upper left")
    if with_kinds:
        ax_kind.set_ylabel("MiB of PSS")
        ax_kind.set_title(
            "workers by kind of page: solid anonymous (heap, copy-on-write), dashed file, dash-dot /dev/shm "
            "(file and shm pages are shared or reclaimable)",
            fontsize=9,
        )
        ax_kind.grid(alpha=0.3)
    shm = [(t - t0, u / MiB) for t, u in zip(run.system.t, run.system.shm_used, strict=False) if u is not None]
    if shm:
        total = run.system.shm_total
        label = "/dev/shm used" + (f" (size {total / MiB:,.0f} MiB)" if total else "")
        ax_shm.plot([t for t, _ in shm], [u for _, u in shm], color="tab:purple", label=label)
        # Draw the size only when use gets near it; otherwise it flattens the line we care about.
        if total and max(u for _, u in shm) > 0.25 * total / MiB:
            ax_shm.axhline(total / MiB, color="tab:red", linestyle="--", label="/dev/shm size")
        ax_shm.legend(fontsize=8, loc="upper left")
    ax_shm.set_ylabel("MiB")
    ax_shm.set_xlabel("seconds since start")
    ax_shm.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return path


def plot_in_background(run_dir: Path) -> None:
    """Draw memory.png in a detached process: importing matplotlib and drawing take 1-2 s that `dlprobe run`
    would otherwise add to every run after the script has finished."""
    subprocess.Popen(
        [sys.executable, "-m", "dlprobe.render.plot", str(run_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C typed after dlprobe returned is for the next command, not for the plot
        close_fds=True,
    )


def draw_run_plot(run_dir: Path) -> None:
    """Load the run and write memory.png atomically; a failure goes to memory.png.error.txt."""
    partial = run_dir / PLOT_PARTIAL_FILE
    try:
        # report.json is written before this process starts; a job's report labels the ranks and the node total.
        report = read_json(run_dir / REPORT_FILE) if (run_dir / REPORT_FILE).exists() else None
        plot_memory(load_run(run_dir), partial, report)
        os.replace(partial, run_dir / PLOT_FILE)
    except Exception as exc:  # detached: no one reads this process's stderr, so the reason is kept in the run
        partial.unlink(missing_ok=True)
        (run_dir / PLOT_ERROR_FILE).write_text(f"could not draw {PLOT_FILE}: {exc}\n")


if __name__ == "__main__":
    draw_run_plot(Path(sys.argv[1]))
