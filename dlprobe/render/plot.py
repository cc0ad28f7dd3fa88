"""The memory plot: USS (solid) and RSS (dotted) of every process, each worker's PSS by kind of page, /dev/shm.

It draws `analysis/memory_plot.py:memory_plot`'s data; `commands/outputs.py` builds it from the run. The analysis is
imported for its types only: the detached plot process (`commands/plot_process.py`) imports this module and
matplotlib, never the analysis."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlprobe import atomic
from dlprobe.own_process import python_module_command
from dlprobe.units import MiB

if TYPE_CHECKING:
    from dlprobe.analysis.memory_plot import MemoryPlot, PlotProcess
    from dlprobe.analysis.report_schema import NodeEntry

KIND_STYLES = (("pss_anon", "-", "anon"), ("pss_file", "--", "file"), ("pss_shmem", "-.", "shm"))


def _plot_kinds(ax: object, proc: PlotProcess, t0: float, color: str) -> None:
    for metric, style, _name in KIND_STYLES:
        values: list[tuple[float, int]] = proc[metric]  # type: ignore[literal-required]
        if values:
            ax.plot(  # type: ignore[attr-defined]
                [t - t0 for t, _ in values], [v / MiB for _, v in values], color=color, linestyle=style
            )


def _plot_node_total(ax: Any, node: NodeEntry | None, t0: float) -> None:
    """A job's node total (every process of the tree: what the OOM killer sees), and its limit when near it."""
    if node is None or not node["pss_total"]["t"]:
        return
    series = node["pss_total"]
    totals = [v / MiB for v in series["bytes"]]
    ax.plot([t - t0 for t in series["t"]], totals, color="black", linewidth=2, label="node total PSS")
    limit = node["memory_limit"]
    if limit and max(totals) > 0.25 * limit / MiB:
        ax.axhline(limit / MiB, color="tab:red", linestyle="--", label=f"memory limit ({node['memory_limit_kind']})")


def plot_memory(data: MemoryPlot, path: Path) -> Path:
    """Write the PNG and return its path; matplotlib is imported only here, so the probe stays light. In a job the
    processes are labelled by rank and the node's total is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = data["t0"]
    shown = data["processes"]
    with_kinds = any(p["role"] == "worker" and p["pss_anon"] for p in shown)
    if with_kinds:
        fig, (ax_mem, ax_kind, ax_shm) = plt.subplots(
            3, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1]}
        )
    else:
        fig, (ax_mem, ax_shm) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, proc in enumerate(shown):
        color = colors[i % len(colors)]
        if with_kinds and proc["role"] == "worker":
            _plot_kinds(ax_kind, proc, t0, color)
        uss, rss = proc["uss"], proc["rss"]
        if uss:
            ax_mem.plot([t - t0 for t, _ in uss], [v / MiB for _, v in uss], color=color, label=f"{proc['label']} USS")
        if rss:
            ax_mem.plot([t - t0 for t, _ in rss], [v / MiB for _, v in rss], color=color, linestyle=":", alpha=0.7)
    _plot_node_total(ax_mem, data["node"], t0)
    ax_mem.set_ylabel("MiB (solid USS, dotted RSS)")
    ax_mem.set_title(f"dlprobe: memory per process, {data['script']}")
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
    shm = [(t - t0, u / MiB) for t, u in zip(data["shm_t"], data["shm_used"], strict=False) if u is not None]
    if shm:
        total = data["shm_total"]
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
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    atomic.write_bytes_atomic(path, png.getvalue())  # never through a link left under the name
    return path


def plot_in_background(run_dir: Path, data: MemoryPlot) -> None:
    """Draw memory.png in a detached process (`commands/plot_process.py`): importing matplotlib and drawing take 1-2 s
    that `dlprobe run` would otherwise add to every run after the script has finished. The plot's data goes to it
    in a private temporary file (which it removes), so it neither imports the analysis nor loads the run again:
    about half a second of CPU less after every run."""
    fd, data_file = tempfile.mkstemp(prefix="dlprobe-plot-", suffix=".json")  # mode 0600, created anew
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        subprocess.Popen(
            python_module_command("dlprobe.commands.plot_process", str(run_dir), data_file),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C typed after dlprobe returned is for the next command, not for the plot
            close_fds=True,
        )
    except BaseException:
        with contextlib.suppress(OSError):  # no process will read it; the caller reports why
            os.unlink(data_file)
        raise
