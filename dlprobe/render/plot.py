"""The memory plot: USS (round dots) and RSS (square dots) of every process, each worker's PSS by kind of page,
/dev/shm; each reading a dot at its time, the span between two readings shaded from the lower to the higher
(render/readings.py), nothing above the cgroup's memory limit.

It draws `analysis.report.memory_plot:memory_plot`'s data; `commands/outputs.py` builds it from the run. The analysis is
imported for its types only: the detached plot process (`commands/plot_process.py`) imports this module and
matplotlib, never the analysis."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlprobe import atomic
from dlprobe.own_process import python_module_command
from dlprobe.render.readings import AsRead, as_read, clipped_note, step_band
from dlprobe.units import MiB

if TYPE_CHECKING:
    from dlprobe.analysis.report.memory_plot import MemoryPlot, PlotProcess
    from dlprobe.analysis.report.schema import NodeEntry

KIND_STYLES = (("pss_anon", "o", "anon"), ("pss_file", "s", "file"), ("pss_shmem", "^", "shm"))


def _plot_readings(ax: Any, data: AsRead, color: str, marker: str = "o", label: str | None = None,
                   size: float = 2.5, shade: float = 0.15) -> None:  # fmt: skip
    """A series as read: a dot per reading, and between two readings a band from the lower to the higher of them
    (a straight line would draw what was never read)."""
    xs, lows, highs = step_band(data.spans)
    if xs:
        ax.fill_between(xs, lows, highs, step="post", color=color, alpha=shade, linewidth=0)
    ax.plot([x for x, _ in data.points], [y for _, y in data.points], linestyle="none", marker=marker,
            markersize=size, color=color, label=label)  # fmt: skip


def _as_read(values: list[tuple[float, int]], t0: float, bound: int | None = None) -> AsRead:
    return as_read(((t - t0, v / MiB) for t, v in values), bound / MiB if bound else None)


def _plot_kinds(ax: object, proc: PlotProcess, t0: float, color: str) -> None:
    for metric, marker, _name in KIND_STYLES:
        values: list[tuple[float, int]] = proc[metric]  # type: ignore[literal-required]
        if values:
            _plot_readings(ax, _as_read(values, t0), color, marker, size=2.0, shade=0.08)


def _plot_node_total(ax: Any, node: NodeEntry | None, t0: float) -> str | None:
    """A job's node total (every process of the tree: what the OOM killer sees), never above its limit (the cgroup's
    or the machine's memory: a sum above it is the readings' timing), and the limit when near it; the note owed for a
    total drawn at the limit."""
    if node is None or not node["pss_total"]["t"]:
        return None
    series = node["pss_total"]
    limit = node["memory_limit"]
    data = _as_read(list(zip(series["t"], series["bytes"], strict=False)), t0, limit)
    _plot_readings(ax, data, "black", size=3.0, label="node total PSS")
    if limit and max(y for _, y in data.points) > 0.25 * limit / MiB:
        ax.axhline(limit / MiB, color="tab:red", linestyle="--", label=f"memory limit ({node['memory_limit_kind']})")
    return clipped_note("the node total", data, f"memory limit ({node['memory_limit_kind']})")


def plot_memory(data: MemoryPlot, path: Path) -> Path:
    """Write the PNG and return its path; matplotlib is imported only here, so the probe stays light. In a job the
    processes are labelled by rank and the node's total is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.layout_engine import TightLayoutEngine

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
    limit = data.get("cgroup_limit")  # older plot data has none
    notes = []
    for i, proc in enumerate(shown):
        color = colors[i % len(colors)]
        if with_kinds and proc["role"] == "worker":
            _plot_kinds(ax_kind, proc, t0, color)
        uss, rss = proc["uss"], proc["rss"]
        if uss:  # private pages are charged to the cgroup: none past its limit
            read = _as_read(uss, t0, limit)
            _plot_readings(ax_mem, read, color, label=f"{proc['label']} USS")
            notes.append(clipped_note(f"{proc['label']} USS", read, "cgroup limit"))
        if rss:  # RSS counts file pages another cgroup may be charged for: drawn as read
            _plot_readings(ax_mem, _as_read(rss, t0), color, "s", size=1.6, shade=0.06)
    notes.append(_plot_node_total(ax_mem, data["node"], t0))
    drawn = [v for p in shown for _, v in p["uss"]]
    if limit and drawn and max(drawn) > 0.25 * limit:  # only near it: far above, it flattens the lines that matter
        ax_mem.axhline(limit / MiB, color="tab:red", linestyle="--", linewidth=1, label="memory limit (cgroup)")
    ax_mem.set_ylabel("MiB (round dots USS, square RSS)")
    said = "\n".join(textwrap.fill(n, 150) for n in notes if n)
    ax_mem.set_title(f"dlprobe: memory per process as read, {data['script']}\n"
                     "dots: readings; shaded: between two readings, from the lower to the higher"
                     + ("\n" + said if said else ""), fontsize=9)  # fmt: skip
    ax_mem.grid(alpha=0.3)
    if ax_mem.get_legend_handles_labels()[1]:
        ax_mem.legend(fontsize=8, loc="upper left")
    if with_kinds:
        ax_kind.set_ylabel("MiB of PSS")
        ax_kind.set_title(
            "workers by kind of page: dots anonymous (heap, copy-on-write), squares file, triangles /dev/shm "
            "(shared or reclaimable)",
            fontsize=9,
        )
        ax_kind.grid(alpha=0.3)
    shm = [(t - t0, u / MiB) for t, u in zip(data["shm_t"], data["shm_used"], strict=False) if u is not None]
    if shm:
        total = data["shm_total"]
        label = "/dev/shm used" + (f" (size {total / MiB:,.0f} MiB)" if total else "")
        _plot_readings(ax_shm, as_read(shm, total / MiB if total else None), "tab:purple", label=label)
        # Draw the size only when use gets near it; otherwise it flattens the line we care about.
        if total and max(u for _, u in shm) > 0.25 * total / MiB:
            ax_shm.axhline(total / MiB, color="tab:red", linestyle="--", label="/dev/shm size")
        ax_shm.legend(fontsize=8, loc="upper left")
    ax_shm.set_ylabel("MiB")
    ax_shm.set_xlabel("seconds since start")
    ax_shm.grid(alpha=0.3)
    # fig.tight_layout()'s layout, without the placeholder layout engine it leaves on the figure: with one, savefig
    # draws the whole figure once more before drawing it for the PNG (0.70 -> 0.56 s of CPU; the same bytes).
    TightLayoutEngine().execute(fig)
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
