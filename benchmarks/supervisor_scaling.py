"""The supervisor's CPU share and peak RSS against the number of processes it watches (1 to 64).

The target imports torch and numpy, holds a 50 MB array and forks N-1 children (like DataLoader workers: the
same mappings, pages shared with the parent), each touching 20 MB of its own, then lives SECONDS. Children
are either idle (sleeping: the cheap readings show no movement, so each is read in full every 5 s) or moving
(each maps, writes and unmaps 4 MB ten times a second, so its page-fault count says its memory moved and it is
read every 0.5 s, within the supervisor's CPU budget). CPU share is result.json's supervisor.cpu_share (its own CPU
over the run's wall time, the target's start-up included); peak RSS is supervisor.max_rss_bytes.

Targets (issue 15): growing at most linearly with the processes watched; <= 3% of one core with 8 workers (9
processes); peak RSS <= 60 MB. Writes benchmarks/out/supervisor_scaling.json and .png.
`--baseline DIR` runs another checkout of dlprobe (e.g. `git archive main | tar -x -C DIR`) at each point right
before this one, so before and after meet the same load.
Usage: python benchmarks/supervisor_scaling.py [--counts 1,2,4,8,16,32,64] [--seconds 15] [--rounds 1]
       [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from _common import PYTHON, machine, median, run

OUT = Path(__file__).resolve().parent / "out"

TREE_SCRIPT = """
import mmap, os, sys, time
import numpy as np
import torch  # noqa: F401  (a worker's mappings: torch's libraries make page-table walks realistic)

count, mode, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
shared = np.ones(50 * 2**20 // 8)
pids = []
end = time.time() + seconds
for _ in range(count - 1):
    pid = os.fork()
    if pid == 0:
        end = time.time() + seconds  # each child lives SECONDS: forking 64 of them takes seconds on a busy machine
        own = np.ones(20 * 2**20 // 8)
        while time.time() < end:
            if mode == "moving":
                # a fresh mapping each time (malloc would reuse freed memory): 1024 page faults, then unmapped
                churn = mmap.mmap(-1, 4 * 2**20)
                churn.write(bytes(4 * 2**20))
                churn.close()
            time.sleep(0.1)
        os._exit(0)
    pids.append(pid)
while time.time() < end:
    time.sleep(0.2)
for pid in pids:
    os.waitpid(pid, 0)
print("done")
"""


def measure(count: int, mode: str, seconds: float, tmp: Path, index: int, tree: Path | None = None) -> dict[str, float]:
    run_dir = tmp / f"{mode}-{count}-{index}{'-baseline' if tree else ''}"
    script = tmp / "tree.py"
    command = [PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir), str(script), str(count), mode]
    if tree is None:
        run([*command, str(seconds)])
    else:  # the other checkout, run from its own directory with itself first on the path
        own = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(tree)
        try:
            run([*command, str(seconds)], cwd=tree)
        finally:
            if own is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = own
    result = json.loads((run_dir / "result.json").read_text())
    sup = result["supervisor"]
    wall = result["ended_at"] - json.loads((run_dir / "meta.json").read_text())["started_at"]
    full_reads = 0
    watched: set[str] = set()
    with (run_dir / "samples.jsonl").open() as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("k") == "s":
                watched.update(rec["p"])
                full_reads += sum(1 for values in rec["p"].values() if "uss" in values)
    return {
        # runs of dlprobe before the CPU budget have only cpu_s (start-up imports included): an upper bound
        "cpu_share": sup.get("cpu_share", sup["cpu_s"] / wall),
        "rss_mb": sup["max_rss_bytes"] / 1e6,
        "full_reads_per_s": full_reads / seconds,
        "watched": len(watched),
        "over_budget_s": sup.get("over_budget_s", 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--counts", default="1,2,4,8,16,32,64")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", default="idle,moving")
    parser.add_argument("--tag", default="", help="suffix for the output files (e.g. to keep a baseline's)")
    parser.add_argument("--baseline", type=Path, help="another dlprobe checkout, run at each point before this one")
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f} at start")
    baseline = args.baseline.resolve() if args.baseline else None
    counts = [int(c) for c in args.counts.split(",")]
    results: dict[str, dict[int, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "tree.py").write_text(TREE_SCRIPT)
        for mode in args.modes.split(","):
            results[mode] = {}
            for count in counts:
                rows, before = [], []
                for i in range(args.rounds):
                    if baseline is not None:
                        before.append(measure(count, mode, args.seconds, tmp, i, baseline))
                    rows.append(measure(count, mode, args.seconds, tmp, i))
                results[mode][count] = {key: median([r[key] for r in rows]) for key in rows[0]}
                results[mode][count]["rss_mb"] = max(r["rss_mb"] for r in rows)
                results[mode][count]["load"] = os.getloadavg()[0]
                if before:
                    results[mode][count]["baseline_cpu_share"] = median([r["cpu_share"] for r in before])
                    results[mode][count]["baseline_full_reads_per_s"] = median([r["full_reads_per_s"] for r in before])
                print(f"  {mode} {count}: {results[mode][count]}", flush=True)
    print(f"\n{args.rounds} round(s) of {args.seconds:g} s per point; CPU share of one core over the run")
    print("mode   | processes | watched | sup CPU | full reads/s | over budget | sup RSS | load | before: CPU, reads/s")
    for mode, by_count in results.items():
        for count, r in by_count.items():
            before = (f"{100 * r['baseline_cpu_share']:5.2f} %, {r['baseline_full_reads_per_s']:5.1f}"
                      if "baseline_cpu_share" in r else "")  # fmt: skip
            print(f"{mode:6} | {count:9d} | {r['watched']:7.0f} | {100 * r['cpu_share']:5.2f} % | "
                  f"{r['full_reads_per_s']:12.1f} | {r['over_budget_s']:9.1f} s | {r['rss_mb']:5.1f} MB | "
                  f"{r['load']:4.1f} | {before}")  # fmt: skip
    print("targets: <= 3% of one core at 9 processes (8 workers); linear or better in processes; RSS <= 60 MB")
    OUT.mkdir(exist_ok=True)
    saved = {"machine": machine(), "results": results}
    (OUT / f"supervisor_scaling{args.tag}.json").write_text(json.dumps(saved, indent=1))
    plot(results, OUT / f"supervisor_scaling{args.tag}.png")
    print(f"wrote {OUT}/supervisor_scaling{args.tag}.json and .png")


def plot(results: dict[str, dict[int, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_cpu, ax_rss) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, by_count in results.items():
        counts = list(by_count)
        ax_cpu.plot(counts, [100 * by_count[c]["cpu_share"] for c in counts], marker="o", label=mode)
        if all("baseline_cpu_share" in by_count[c] for c in counts):
            before = [100 * by_count[c]["baseline_cpu_share"] for c in counts]
            ax_cpu.plot(counts, before, marker="x", linestyle="--", label=f"{mode}, baseline")
        ax_rss.plot(counts, [by_count[c]["rss_mb"] for c in counts], marker="o", label=mode)
    ax_cpu.axhline(3, color="tab:red", linestyle=":", label="budget 3%")
    ax_rss.axhline(60, color="tab:red", linestyle=":", label="target 60 MB")
    for ax, ylabel in ((ax_cpu, "supervisor CPU, % of one core"), (ax_rss, "supervisor peak RSS, MB")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("processes watched")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("dlprobe supervisor cost against processes watched")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
