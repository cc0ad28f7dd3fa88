"""Training under `dlprobe run` against plain python: throughput, the tail of batch waits, whole wall time.

Alternates plain and probed runs (A B A B ...) of one loader-bound script at 2, 8 and 32 workers and prints
medians of the per-round ratios, so load from other users of the machine hits both sides alike. The script
times its own loop (each `next()` after a warm-up) in both runs, so the p99 wait is measured the same way.
After a probed run the benchmark waits for its background plot before the next round and reports how long
the plot took on its own line (it is not part of the run's wall time: `dlprobe run` has returned by then).

Targets (issue 15): throughput >= 0.98 of plain at 2 and 8 workers; p99 batch wait within 10% of plain;
whole wall time <= 1.05x plain on a ~5 s script; supervisor <= 3% of one core with 8 workers, peak RSS <= 60 MB.
Writes benchmarks/out/probe_overhead.json and .png.
`--baseline DIR` runs another checkout of dlprobe (e.g. `git archive main | tar -x -C DIR`) probed in each round
too, right after this one's, so before and after meet the same load (baseline_throughput_ratio).
Usage: python benchmarks/probe_overhead.py [--rounds N] [--workers 2,8,32] [--scale 12 (a ~60 s loop)]
       [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric, run

OUT = Path(__file__).resolve().parent / "out"

LOADER_SCRIPT = """
import sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

class Work(Dataset):
    def __init__(self, rounds):
        self.rounds = rounds
    def __len__(self):
        return 10_000_000
    def __getitem__(self, i):
        x = np.random.default_rng(i).standard_normal(2048)
        for _ in range(self.rounds):
            x = np.sort(x)[::-1].copy()
        return torch.from_numpy(x[:64].astype(np.float32))

if __name__ == "__main__":
    workers, batches, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    loader = DataLoader(Work(rounds), batch_size=64, num_workers=workers, persistent_workers=True)
    it = iter(loader)
    for _ in range(2 * workers + 4):   # warm up: every worker started and has delivered
        next(it)
    waits = []
    start = time.perf_counter()
    for _ in range(batches):
        t = time.perf_counter()
        next(it)
        waits.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    waits.sort()
    print("throughput", batches / elapsed)
    print("p99_wait_ms", 1000 * waits[min(len(waits) - 1, int(0.99 * len(waits)))])
"""

# batches and sorting rounds per item: a plain run of each is ~5 s on 2 cores, torch import included
SETUPS = {2: (300, 4), 8: (300, 4), 32: (200, 2)}


def wait_for_plot(run_dir: Path, timeout: float = 120) -> float:
    """Seconds until the background plotter left memory.png (or its error file)."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if (run_dir / "memory.png").exists() or (run_dir / "memory.png.error.txt").exists():
            return time.perf_counter() - start
        time.sleep(0.05)
    return float("nan")


def probed_by(tree: Path, command: list[str]) -> float:
    """The throughput of `command` run with another checkout of dlprobe first on the path, from its own directory."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"baseline run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return parse_metric(proc.stdout, "throughput")


def scenario(
    workers: int, rounds: int, tmp: Path, scale: float = 1.0, baseline: Path | None = None
) -> dict[str, float]:
    script = tmp / "loader_bound.py"
    batches, work = SETUPS.get(workers, (300, 4))
    batches = int(batches * scale)  # --scale 12: a ~60 s loop, where start-up weighs less than on the ~5 s one
    args = [str(script), str(workers), str(batches), str(work)]
    rows: list[dict[str, float]] = []
    for i in range(rounds):
        plain, plain_s = run([PYTHON, *args])
        run_dir = tmp / f"w{workers}-{i}"
        probed, probed_s = run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir), *args])
        plot_s = wait_for_plot(run_dir)
        sup = json.loads((run_dir / "result.json").read_text())["supervisor"]
        stacks = run_dir / "stacks.json"  # py-spy's own CPU over its bursts (absent: the loop never starved)
        spy_cpu_s = json.loads(stacks.read_text()).get("cpu_s", float("nan")) if stacks.exists() else 0.0
        rows.append({
            "throughput_ratio": parse_metric(probed.stdout, "throughput") / parse_metric(plain.stdout, "throughput"),
            "p99_ratio": parse_metric(probed.stdout, "p99_wait_ms") / parse_metric(plain.stdout, "p99_wait_ms"),
            "plain_p99_ms": parse_metric(plain.stdout, "p99_wait_ms"),
            "probed_p99_ms": parse_metric(probed.stdout, "p99_wait_ms"),
            "plain_wall_s": plain_s,
            "probed_wall_s": probed_s,
            "wall_ratio": probed_s / plain_s,
            "plot_s": plot_s,
            "cpu_share": sup["cpu_share"],
            "rss_mb": sup["max_rss_bytes"] / 1e6,
            "over_budget_s": sup.get("over_budget_s", 0.0),
            "spy_cpu_s": spy_cpu_s,
        })  # fmt: skip
        if baseline is not None:
            before_dir = tmp / f"w{workers}-{i}-baseline"
            before = probed_by(baseline, [PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(before_dir), *args])
            wait_for_plot(before_dir)  # its background plot must not load the next round
            rows[-1]["baseline_throughput_ratio"] = before / parse_metric(plain.stdout, "throughput")
    summary = {key: median([r[key] for r in rows]) for key in rows[0]}
    summary["rss_mb"] = max(r["rss_mb"] for r in rows)
    summary["throughput_ratio_min"] = min(r["throughput_ratio"] for r in rows)
    summary["throughput_ratio_max"] = max(r["throughput_ratio"] for r in rows)
    return summary


def print_table(results: dict[int, dict[str, float]], rounds: int) -> None:
    print(f"\nmedians of {rounds} alternating rounds (plain, probed); ratios are probed/plain within a round")
    header = ("workers", "thr ratio (min-max)", "p99 plain", "p99 probed", "p99 ratio", "wall plain",
              "wall ratio", "plot after", "sup CPU", "sup RSS", "py-spy CPU")  # fmt: skip
    print(" | ".join(header))
    for workers, s in results.items():
        if "baseline_throughput_ratio" in s:
            print(f"{workers:7d} | baseline checkout's thr ratio {s['baseline_throughput_ratio']:.3f}")
        print(
            f"{workers:7d} | {s['throughput_ratio']:.3f} ({s['throughput_ratio_min']:.2f}-"
            f"{s['throughput_ratio_max']:.2f}) | {s['plain_p99_ms']:7.1f} ms | {s['probed_p99_ms']:8.1f} ms | "
            f"{s['p99_ratio']:9.2f} | {s['plain_wall_s']:8.2f} s | {s['wall_ratio']:10.3f} | {s['plot_s']:8.2f} s | "
            f"{100 * s['cpu_share']:5.2f} % | {s['rss_mb']:5.1f} MB | {s['spy_cpu_s']:.2f} s"
        )
    print("targets: thr ratio >= 0.98 (2, 8 workers); p99 ratio <= 1.10; wall ratio <= 1.05; sup CPU <= 3% (8 "
          "workers); sup RSS <= 60 MB")  # fmt: skip


def plot(results: dict[int, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = list(results)
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("throughput_ratio", "throughput"), ("p99_ratio", "p99 batch wait"), ("wall_ratio", "wall")):
        ax.plot(workers, [results[w][key] for w in workers], marker="o", label=label)
    ax.axhline(0.98, color="tab:red", linestyle=":", label="throughput target 0.98")
    ax.axhline(1.05, color="tab:gray", linestyle=":", label="wall target 1.05")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("DataLoader workers")
    ax.set_ylabel("probed / plain (median)")
    ax.set_title("dlprobe run against plain python")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="2,8,32", help="comma-separated worker counts")
    parser.add_argument("--scale", type=float, default=1.0, help="batches x this (12: a ~60 s plain run)")
    parser.add_argument("--baseline", type=Path, help="another dlprobe checkout, probed in each round after this one")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "loader_bound.py").write_text(LOADER_SCRIPT)
        for workers in (int(w) for w in args.workers.split(",")):
            baseline = args.baseline.resolve() if args.baseline else None
            results[workers] = scenario(workers, args.rounds, tmp, args.scale, baseline)
            print(f"  {workers} workers done: {results[workers]}", flush=True)
    print_table(results, args.rounds)
    OUT.mkdir(exist_ok=True)
    name = "probe_overhead" if args.scale == 1.0 else f"probe_overhead_x{args.scale:g}"
    record = {"machine": machine(), "scale": args.scale, "results": results}
    (OUT / f"{name}.json").write_text(json.dumps(record, indent=1))
    plot(results, OUT / f"{name}.png")
    print(f"wrote {OUT / f'{name}.json'} and {OUT / f'{name}.png'}")


if __name__ == "__main__":
    main()
