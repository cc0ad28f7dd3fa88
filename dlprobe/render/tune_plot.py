"""The tune plot: throughput and memory against num_workers, one line per prefetch_factor/pin_memory setting."""

from __future__ import annotations

import io
from pathlib import Path

from dlprobe import atomic
from dlprobe.tune.records import TrialRow, TuneResult
from dlprobe.units import MiB


def plot_tune(result: TuneResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rate, ax_mem) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    groups: dict[str, list[TrialRow]] = {}
    for t in result["trials"]:
        if t.get("samples_per_s") is None:
            continue
        label = "prefetch_factor=2" if t["num_workers"] == 0 else f"prefetch_factor={t['prefetch_factor']}"
        if t.get("pin_memory"):
            label += ", pin_memory"
        groups.setdefault(label, []).append(t)
    if any(t["num_workers"] == 0 for g in groups.values() for t in g) and "prefetch_factor=2" not in groups:
        groups["prefetch_factor=2"] = []
    for label, trials in sorted(groups.items()):
        trials = sorted(trials, key=lambda t: t["num_workers"])
        xs = [t["num_workers"] for t in trials]
        style = "o-" if len(trials) > 1 else "s"
        ax_rate.plot(xs, [t["samples_per_s"] for t in trials], style, label=label)
        projected = [(t["num_workers"], t.get("projected_epoch_bytes")) for t in trials]
        mem = [(x, m / MiB) for x, m in projected if m is not None]
        if mem:
            ax_mem.plot([x for x, _ in mem], [m for _, m in mem], style, label=f"{label}: projected for an epoch")
    failed = [t for t in result["trials"] if t.get("status") not in ("ok", "skipped")]
    for t in failed:
        ax_rate.axvline(t["num_workers"], color="tab:red", alpha=0.3, linestyle=":")
    chosen = result.get("recommended")
    if chosen and chosen.get("samples_per_s"):
        ax_rate.plot([chosen["num_workers"]], [chosen["samples_per_s"]], "*", color="gold", markersize=18,
                     markeredgecolor="black", label="recommended")  # fmt: skip
    budget = (result.get("memory") or {}).get("budget_bytes")
    if budget and ax_mem.lines:
        top = max(max(line.get_ydata()) for line in ax_mem.lines)
        if top > 0.2 * budget / MiB:  # only when it is in sight; otherwise it flattens the lines
            ax_mem.axhline(budget / MiB, color="tab:red", linestyle="--", label="memory available")
    ax_rate.set_ylabel("samples/s")
    ax_rate.set_title(f"dlprobe tune: {result['script']} (loader {result['loader']})")
    ax_rate.grid(alpha=0.3)
    ax_rate.legend(fontsize=8)
    ax_mem.set_ylabel("MiB (workers' USS + /dev/shm)")
    ax_mem.set_xlabel("num_workers")
    ax_mem.grid(alpha=0.3)
    if ax_mem.lines:
        ax_mem.legend(fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    atomic.write_bytes_atomic(path, png.getvalue())  # never through a link left under the name
    return path
