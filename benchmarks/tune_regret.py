"""`dlprobe tune` against an exhaustive sweep on seven loaders: regret of its pick, its time, its prediction error.

For each loader in benchmarks/tune_loaders.py (CPU-bound, I/O-bound, mixed, consumer-bound, memory-bound in a
memory cgroup (root only), skewed per-sample cost, fewer shards than workers): the sweep times a plain DataLoader
loop (with the loader's training step) at every configuration tune may recommend, num_workers 0 to 32 by
prefetch_factor 1, 2 and 4, in one process (no start-up per configuration: the cheapest exhaustive sweep there is);
tune runs on the same script. Then tune's pick and the sweep's best are timed again the same plain way, alternately,
ROUNDS times each, and each keeps its best (other work on the machine only ever slows a timing).
Regret = 1 - pick / best of those. The sweep's time over the 7 counts 0, 1, 2, 4, 8, 16, 32 at prefetch_factor=2 (a
sparse grid a user might time by hand) is reported beside it, from the same sweep's per-configuration times.
Targets (issue 22): regret <= 5%, tune <= 25% of the sweep's time, median prediction error <= 15%, no pick projected
above the memory limit. Prints a markdown table and writes it to benchmarks/out/tune_regret.md.
Usage: python benchmarks/tune_regret.py [--budget 30] [--max-workers 32] [KIND ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import PYTHON, machine

HERE = Path(__file__).resolve().parent
LOADERS = HERE / "tune_loaders.py"
SPARSE = (0, 1, 2, 4, 8, 16, 32)  # the hand-timed grid, at prefetch_factor=2
PREFETCH = (1, 2, 4)  # what tune tries (dlprobe/tune/plan.py): 2, then 4 where workers wait and 1 where memory bounds
ROUNDS = 3  # re-timings of the pick and the sweep's best, alternating
# Each re-timing's steady window: the sweep's 0.5 s (as a tune trial's) read 10 and 18 workers of the mixed loader
# 3,306-3,400 and 3,228-3,537 samples/s in three alternate rounds; the best of three of the noisier count was a 10%
# "regret" that was noise. Four times as long, each timing's noise halves.
RETIME_S = 2.0
KINDS = ("cpu", "io", "mixed", "consumer", "memory", "skewed", "shards")
# The memory-bound kind: the script and three 150 MiB workers fit, four do not. At 800 MiB four needed ~803 MiB and
# survived 2 sweeps in 3 (the kernel reclaims the page cache first): a best that fits by chance. 760 MiB leaves three
# ~100 MiB to spare and puts four ~40 MiB over.
MEMORY_LIMIT = 760 * 2**20
# A configuration run alone (one the in-process sweep leaves out, above a count the OOM killer took at every
# prefetch_factor) that gives no result in this long hung: a hand sweep would wait on it longer.
ALONE_TIMEOUT_S = 60.0


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A fresh memory cgroup (v1 or v2), removed afterwards with anything left in it."""
    name = f"dlprobe-bench-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.exists() and "memory" in v2.read_text().split():
        path, files = Path("/sys/fs/cgroup") / name, [("memory.max", limit), ("memory.swap.max", 0)]
    else:
        path = Path("/sys/fs/cgroup/memory") / name
        files = [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)]
    path.mkdir()
    try:
        for filename, value in files:
            with contextlib.suppress(OSError):  # no swap accounting: no memsw file
                (path / filename).write_text(str(value))
        yield path
    finally:
        for _ in range(50):
            with contextlib.suppress(OSError, ValueError):
                for pid in (path / "cgroup.procs").read_text().split():
                    os.kill(int(pid), 9)  # only this benchmark's processes are in there
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _run(cmd: list[str], group: Path | None, timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], float]:
    if group is not None:
        cmd = ["sh", "-c", f"echo $$ > {group}/cgroup.procs && exec " + " ".join(cmd)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE)
    return proc, time.perf_counter() - start


def run_alone(kind: str, rows: list[dict[str, Any]], group: Path | None) -> tuple[int, float]:
    """Run each configuration the in-process sweep left out (above a count that failed at every prefetch_factor) in a
    process of its own, as a hand sweep would, each within ALONE_TIMEOUT_S; returns how many, and their time."""
    count, total = 0, 0.0
    for i, row in enumerate(rows):
        if not str(row["status"]).startswith("not run"):
            continue
        one = spec(row["num_workers"], row["prefetch_factor"])
        start = time.perf_counter()
        try:
            proc, wall = _run([PYTHON, str(LOADERS), "sweep", kind, one], group, ALONE_TIMEOUT_S)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            new = json.loads(lines[-1]) if lines else {**row, "status": f"failed: exit {proc.returncode}"}
        except subprocess.TimeoutExpired:
            wall = time.perf_counter() - start
            new = {**row, "samples_per_s": None, "status": f"hung: no result in {ALONE_TIMEOUT_S:g} s"}
        rows[i] = {**new, "wall_s": round(wall, 3), "alone": True}
        count, total = count + 1, total + wall
    return count, total


def sweep(
    kind: str, specs: list[str], group: Path | None, window_s: float | None = None
) -> tuple[list[dict[str, Any]], float]:
    window = [] if window_s is None else [f"{window_s:g}"]
    proc, wall = _run([PYTHON, str(LOADERS), "sweep", kind, ",".join(specs), *window], group)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(rows) != len(specs):
        raise SystemExit(f"the {kind} sweep timed {len(rows)} of {len(specs)} configurations:\n{proc.stderr[-2000:]}")
    return rows, wall


def tune(kind: str, budget: float, cap: int, group: Path | None, out: Path) -> tuple[dict[str, Any], float]:
    json_path = out / f"{kind}.json"
    cmd = [PYTHON, "-m", "dlprobe", "tune", "--budget", f"{budget:g}s", "--max-workers", str(cap),
           "--out", str(out / kind), "--json", str(json_path), str(LOADERS), "train", kind]  # fmt: skip
    proc, wall = _run(cmd, group)
    if not json_path.exists():
        raise SystemExit(f"tune wrote no result for {kind}:\n{proc.stderr[-2000:]}")
    (out / f"{kind}.txt").write_text(proc.stderr)
    return json.loads(json_path.read_text()), wall


def spec(num_workers: int, prefetch_factor: int | None) -> str:
    return str(num_workers) if num_workers == 0 else f"{num_workers}:{prefetch_factor or 2}"


def exhaustive(cap: int) -> list[str]:
    return ["0"] + [spec(n, pf) for n in range(1, cap + 1) for pf in PREFETCH]


def sparse_time(rows: list[dict[str, Any]], whole_s: float) -> float:
    """The sweep's time over the sparse grid alone: its configurations' own times and the sweep process's start."""
    start = whole_s - sum(r["wall_s"] for r in rows)
    chosen = [r for r in rows if r["num_workers"] in SPARSE and (r["num_workers"] == 0 or r["prefetch_factor"] == 2)]
    return start + sum(r["wall_s"] for r in chosen)


def retime(kind: str, pick: str, best: str, group: Path | None) -> tuple[float | None, float | None]:
    """The best of ROUNDS alternate timings of the pick and the sweep's best, each over RETIME_S (None: every timing
    failed)."""
    rows, _ = sweep(kind, [pick, best] * ROUNDS, group, RETIME_S)
    rates = [r["samples_per_s"] for r in rows]
    picks, bests = [x for x in rates[0::2] if x], [x for x in rates[1::2] if x]
    return max(picks, default=None), max(bests, default=None)


def one(kind: str, budget: float, cap: int, out: Path) -> dict[str, Any]:
    if kind == "memory" and os.geteuid() != 0:
        return {"kind": kind, "skipped": "needs root: a memory cgroup"}
    with memory_cgroup(MEMORY_LIMIT) if kind == "memory" else contextlib.nullcontext() as group:
        swept, sweep_s = sweep(kind, exhaustive(cap), group)
        shortened_s = sweep_s
        alone, alone_s = run_alone(kind, swept, group)
        sweep_s += alone_s
        (out / f"{kind}_sweep.json").write_text(json.dumps(swept, indent=1))
        result, tune_s = tune(kind, budget, cap, group, out)
        ok = [r for r in swept if r["samples_per_s"]]
        if not ok:
            return {"kind": kind, "skipped": "every configuration of the sweep failed"}
        best = max(ok, key=lambda r: r["samples_per_s"])
        best_spec = spec(best["num_workers"], best["prefetch_factor"])
        pick = result.get("recommended")
        pick_rate = best_rate = None
        if pick is not None:
            pick_spec = spec(pick["num_workers"], pick.get("prefetch_factor"))
            pick_rate, best_rate = retime(kind, pick_spec, best_spec, group)
    memory = result.get("memory") or {}
    projected = (pick or {}).get("projected_epoch_bytes")
    fits = None
    if kind == "memory":
        fits = bool(pick_rate) and projected is not None and projected <= (memory.get("budget_bytes") or 0)
    top = max(best_rate or 0.0, pick_rate or 0.0)
    return {
        "kind": kind,
        "best": best_spec,
        "best_rate": best_rate,
        "failed": sorted({r["num_workers"] for r in swept if not r["samples_per_s"]}),
        "pick": None if pick is None else spec(pick["num_workers"], pick.get("prefetch_factor")),
        "pick_pinned": bool((pick or {}).get("pin_memory")),
        "pick_rate": pick_rate,
        "regret": None if not pick_rate else 1 - pick_rate / top,
        "tune_s": tune_s,
        "sweep_s": sweep_s,
        "shortened_s": shortened_s,
        "alone": alone,
        "sparse_s": sparse_time(swept, sweep_s),
        "configurations": len(swept),
        "median_error": (result.get("prediction") or {}).get("median_error"),
        "trials": len(result.get("trials") or []),
        "oom_trials": [t["num_workers"] for t in result.get("trials") or [] if t.get("status") == "oom"],
        "fits": fits,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _counts(failed: list[int]) -> str:
    """Failed worker counts, a run of consecutive ones as a range."""
    if not failed:
        return ""
    if failed == list(range(failed[0], failed[-1] + 1)) and len(failed) > 2:
        return f" ({failed[0]}-{failed[-1]} failed)"
    return f" ({', '.join(map(str, failed))} failed)"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| loader | sweep's best (workers:prefetch) | tune's pick | pick / best samples/s, re-timed | regret "
             "| tune time | exhaustive sweep (configurations) | tune / sweep | 7-count sweep | tune / 7-count "
             "| median prediction error | trials (OOM) | pick fits memory |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['kind']} | {r['skipped']} |" + " |" * 11)
            continue
        pick = "none" if r["pick"] is None else r["pick"] + (" pinned" if r["pick_pinned"] else "")
        rates = "-" if not r["pick_rate"] else f"{r['pick_rate']:,.0f} / {r['best_rate'] or 0:,.0f}"
        oom = f" ({', '.join(map(str, r['oom_trials']))} oom)" if r["oom_trials"] else ""
        fits = "-" if r["fits"] is None else ("yes" if r["fits"] else "NO")
        configurations = str(r["configurations"])
        if r["alone"]:  # and what tune takes of the sweep that stops at the count the OOM killer took
            configurations += (f", {r['alone']} run alone; {r['shortened_s']:.0f} s without them: tune "
                               f"{_pct(r['tune_s'] / r['shortened_s'])}")  # fmt: skip
        lines.append(
            f"| {r['kind']} | {r['best']}{_counts(r['failed'])} | {pick} | {rates} | {_pct(r['regret'])} | "
            f"{r['tune_s']:.0f} s | {r['sweep_s']:.0f} s ({configurations}) | {_pct(r['tune_s'] / r['sweep_s'])} "
            f"| {r['sparse_s']:.0f} s | {_pct(r['tune_s'] / r['sparse_s'])} | {_pct(r['median_error'])} | "
            f"{r['trials']}{oom} | {fits} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=30.0, help="tune's --budget in seconds")
    parser.add_argument("--max-workers", type=int, default=32, help="tune's cap, and the sweep's largest count")
    parser.add_argument("kinds", nargs="*", default=list(KINDS))
    args = parser.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            rows.append(one(kind, args.budget, args.max_workers, Path(tmp)))
            print(f"{kind}: done", file=sys.stderr, flush=True)
            for name in (f"{kind}.txt", f"{kind}.json", f"{kind}_sweep.json"):  # tune's output and the sweep's
                if (Path(tmp) / name).exists():
                    (out / f"tune_regret_{name}").write_text((Path(tmp) / name).read_text())
            write(rows, args, out)  # after each loader: a run cut short keeps the loaders it finished


def write(rows: list[dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    text = (f"{machine()}; tune --budget {args.budget:g}s --max-workers {args.max_workers}; exhaustive sweep "
            f"num_workers 0-{args.max_workers} x prefetch_factor {', '.join(map(str, PREFETCH))}; pick and best "
            f"re-timed {ROUNDS} times each over {RETIME_S:g} s, best kept\n\n")  # fmt: skip
    text += table(rows)
    regrets = [r["regret"] for r in rows if r.get("regret") is not None]
    errors = [r["median_error"] for r in rows if r.get("median_error") is not None]
    ratios = [r["tune_s"] / r["sweep_s"] for r in rows if "tune_s" in r]
    text += (
        f"\n\nworst regret {_pct(max(regrets) if regrets else None)}, "
        f"largest tune/sweep time {_pct(max(ratios) if ratios else None)}, "
        f"largest median prediction error {_pct(max(errors) if errors else None)}\n"
    )
    (out / "tune_regret.md").write_text(text)
    if len(rows) == len(args.kinds):
        print(text)


if __name__ == "__main__":
    main()
