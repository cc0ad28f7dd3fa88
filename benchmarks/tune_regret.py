"""`dlprobe tune` against an exhaustive sweep on seven loaders: regret of its pick, its time, its prediction error.

For each loader in benchmarks/tune_loaders.py (CPU-bound, I/O-bound, mixed, consumer-bound, memory-bound in a
memory cgroup (root only), skewed per-sample cost, fewer shards than workers): the sweep times a plain DataLoader
loop (with the loader's training step) at each num_workers in GRID; tune runs on the same script; tune's pick is
timed the same plain way. Regret = 1 - pick / best measured (the best of the sweep and the pick).
Targets (issue 22): regret <= 5%, tune <= 25% of the sweep's time, median prediction error <= 15%, no pick projected
above the memory limit. Prints a markdown table and writes it to benchmarks/out/tune_regret.md.
Usage: python benchmarks/tune_regret.py [--budget 30] [KIND ...]
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
GRID = (0, 1, 2, 4, 8, 16, 32)
KINDS = ("cpu", "io", "mixed", "consumer", "memory", "skewed", "shards")
MEMORY_LIMIT = 800 * 2**20  # the memory-bound kind: the script and three 150 MiB workers fit, four do not


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


def _run(cmd: list[str], group: Path | None) -> tuple[subprocess.CompletedProcess[str], float]:
    if group is not None:
        cmd = ["sh", "-c", f"echo $$ > {group}/cgroup.procs && exec " + " ".join(cmd)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=HERE)
    return proc, time.perf_counter() - start


def sweep(kind: str, specs: str, group: Path | None) -> tuple[list[dict[str, Any]], float]:
    proc, wall = _run([PYTHON, str(LOADERS), "sweep", kind, specs], group)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return rows, wall


def tune(kind: str, budget: float, group: Path | None, out: Path) -> tuple[dict[str, Any], float]:
    json_path = out / f"{kind}.json"
    cmd = [PYTHON, "-m", "dlprobe", "tune", "--budget", f"{budget:g}s", "--out", str(out / kind), "--json",
           str(json_path), str(LOADERS), "train", kind]  # fmt: skip
    proc, wall = _run(cmd, group)
    if not json_path.exists():
        raise SystemExit(f"tune wrote no result for {kind}:\n{proc.stderr[-2000:]}")
    (out / f"{kind}.txt").write_text(proc.stderr)
    return json.loads(json_path.read_text()), wall


def one(kind: str, budget: float, out: Path) -> dict[str, Any]:
    if kind == "memory" and os.geteuid() != 0:
        return {"kind": kind, "skipped": "needs root: a memory cgroup"}
    with memory_cgroup(MEMORY_LIMIT) if kind == "memory" else contextlib.nullcontext() as group:
        swept, sweep_s = sweep(kind, ",".join(map(str, GRID)), group)
        result, tune_s = tune(kind, budget, group, out)
        pick = result.get("recommended")
        measured = None
        if pick is not None:
            n, pf = pick["num_workers"], pick.get("prefetch_factor")
            same = [r for r in swept if r["num_workers"] == n and (n == 0 or (pf or 2) == 2)]
            if same:
                measured = same[0]
            else:
                spec = f"{n}:{pf}" if n and pf else str(n)
                measured = sweep(kind, spec, group)[0][0]
    ok = [r for r in swept if r["samples_per_s"]]
    best = max(ok, key=lambda r: r["samples_per_s"])
    pick_rate = (measured or {}).get("samples_per_s")
    top = max(best["samples_per_s"], pick_rate or 0.0)
    memory = result.get("memory") or {}
    projected = (pick or {}).get("projected_epoch_bytes")
    fits = None
    if kind == "memory":
        fits = bool(pick_rate) and projected is not None and projected <= (memory.get("budget_bytes") or 0)
    return {
        "kind": kind,
        "best_n": best["num_workers"],
        "best": best["samples_per_s"],
        "failed": [r["num_workers"] for r in swept if not r["samples_per_s"]],
        "pick": None if pick is None else (pick["num_workers"], pick.get("prefetch_factor")),
        "pick_rate": pick_rate,
        "regret": None if not pick_rate else 1 - pick_rate / top,
        "tune_s": tune_s,
        "sweep_s": sweep_s,
        "median_error": (result.get("prediction") or {}).get("median_error"),
        "trials": len(result.get("trials") or []),
        "oom_trials": [t["num_workers"] for t in result.get("trials") or [] if t.get("status") == "oom"],
        "fits": fits,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| loader | sweep best (workers: samples/s) | tune's pick (workers, prefetch) | pick samples/s | regret "
             "| tune time | sweep time | tune / sweep | median prediction error | trials (OOM) | pick fits memory |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['kind']} | {r['skipped']} |" + " |" * 9)
            continue
        pick = "none" if r["pick"] is None else f"{r['pick'][0]}, {r['pick'][1] or '-'}"
        failed = f" ({', '.join(map(str, r['failed']))} failed)" if r["failed"] else ""
        oom = f" ({', '.join(map(str, r['oom_trials']))} oom)" if r["oom_trials"] else ""
        fits = "-" if r["fits"] is None else ("yes" if r["fits"] else "NO")
        lines.append(
            f"| {r['kind']} | {r['best_n']}: {r['best']:,.0f}{failed} | {pick} | "
            f"{'-' if not r['pick_rate'] else format(r['pick_rate'], ',.0f')} | {_pct(r['regret'])} | "
            f"{r['tune_s']:.0f} s | {r['sweep_s']:.0f} s | {_pct(r['tune_s'] / r['sweep_s'])} | "
            f"{_pct(r['median_error'])} | {r['trials']}{oom} | {fits} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=30.0, help="tune's --budget in seconds")
    parser.add_argument("kinds", nargs="*", default=list(KINDS))
    args = parser.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            rows.append(one(kind, args.budget, Path(tmp)))
            print(f"{kind}: done", file=sys.stderr, flush=True)
            for name in (f"{kind}.txt", f"{kind}.json"):  # tune's own output, kept for a look
                if (Path(tmp) / name).exists():
                    (out / f"tune_regret_{name}").write_text((Path(tmp) / name).read_text())
    text = f"{machine()}; tune --budget {args.budget:g}s; sweep grid num_workers={','.join(map(str, GRID))}\n\n"
    text += table(rows)
    regrets = [r["regret"] for r in rows if r.get("regret") is not None]
    errors = [r["median_error"] for r in rows if r.get("median_error") is not None]
    ratios = [r["tune_s"] / r["sweep_s"] for r in rows if "tune_s" in r]
    text += (
        f"\n\nworst regret {_pct(max(regrets) if regrets else None)}, "
        f"largest tune/sweep time {_pct(max(ratios) if ratios else None)}, "
        f"largest median prediction error {_pct(max(errors) if errors else None)}\n"
    )
    print(text)
    (out / "tune_regret.md").write_text(text)


if __name__ == "__main__":
    main()
