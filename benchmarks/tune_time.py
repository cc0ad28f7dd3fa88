"""Where `dlprobe tune`'s wall time goes on benchmarks/tune_loaders.py's loaders, against a plain sweep of the grid.

Phases of one tune (from its run directory's timestamps): dlprobe's own start (the CLI and supervisor up to the
script's start), the script up to its DataLoader (Python, torch, the dataset), each trial (its workers' start up to the
first batch, then the timed batches), the gaps between trials (stopping a trial's workers), the script's exit and the
supervisor reading the run, and the report (tune.png, report.html, the table). Issue 22's target: tune <= 25% of the
sweep's time. Usage: python benchmarks/tune_time.py [--budget 30] [KIND ...] (the memory kind is left out: it needs a
cgroup; tune_regret.py times it). Writes benchmarks/out/tune_time.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import PYTHON, machine

HERE = Path(__file__).resolve().parent
LOADERS = HERE / "tune_loaders.py"
GRID = "0,1,2,4,8,16,32"
KINDS = ("cpu", "io", "mixed", "consumer", "skewed", "shards")
PHASES = ("dlprobe start", "script to its loader", "trials: workers' start", "trials: timed", "trials: workers' stop",
          "between trials", "exit and read", "report")  # fmt: skip


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in (path / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut off when the script was killed
            out.append({})
    return out


def breakdown(out: Path, launched: float, ended: float) -> dict[str, float]:
    """Seconds per phase of one tune run written under `out` (one attempt or more: each adds its own start)."""
    phases = dict.fromkeys(PHASES, 0.0)
    last_end = launched
    for attempt in sorted(out.glob("attempt-*")):
        meta = json.loads((attempt / "meta.json").read_text())
        result = json.loads((attempt / "result.json").read_text())
        events = _events(attempt)
        started = float(meta["started_at"])
        loader = next((e["t"] for e in events if e.get("ev") == "tune_loader"), None)
        phases["dlprobe start"] += started - last_end
        starts = [e for e in events if e.get("ev") == "trial_start"]
        ends = [e for e in events if e.get("ev") == "trial_end"]
        if loader is not None:
            phases["script to its loader"] += loader - started
        for s, e in zip(starts, ends, strict=False):
            first = min(e.get("first_batch_s") or 0.0, e["t"] - s["t"])
            stop = min(e.get("shutdown_s") or 0.0, e["t"] - s["t"] - first)
            phases["trials: workers' start"] += first
            phases["trials: workers' stop"] += stop
            phases["trials: timed"] += e["t"] - s["t"] - first - stop
        if starts and ends:
            phases["between trials"] += (ends[-1]["t"] - starts[0]["t"]) - sum(
                e["t"] - s["t"] for s, e in zip(starts, ends, strict=False)
            )
            phases["between trials"] += starts[0]["t"] - loader if loader is not None else 0.0
        last_end = float(result.get("ended_at") or (ends[-1]["t"] if ends else started))
        phases["exit and read"] += last_end - (ends[-1]["t"] if ends else last_end)
    written = (out / "tune.json").stat().st_mtime
    phases["exit and read"] += written - last_end
    phases["report"] = ended - written
    return phases


def one(kind: str, budget: float, tmp: Path) -> dict[str, Any]:
    start = time.time()
    subprocess.run([PYTHON, str(LOADERS), "sweep", kind, GRID], capture_output=True, text=True, timeout=600, cwd=HERE)
    sweep_s = time.time() - start
    out = tmp / kind
    launched = time.time()
    subprocess.run([PYTHON, "-m", "dlprobe", "tune", "--budget", f"{budget:g}s", "--out", str(out), str(LOADERS),
                    "train", kind], capture_output=True, text=True, timeout=600, cwd=HERE)  # fmt: skip
    ended = time.time()
    result = json.loads((out / "tune.json").read_text())
    trials = [t for t in result["trials"] if t.get("status") != "skipped"]
    return {"kind": kind, "tune_s": ended - launched, "sweep_s": sweep_s, "trials": len(trials),
            "phases": breakdown(out, launched, ended)}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    head = "| loader | tune | sweep | tune / sweep | trials | " + " | ".join(PHASES) + " |"
    lines = [head, "|" + "---|" * (5 + len(PHASES))]
    for r in rows:
        cells = " | ".join(f"{r['phases'][p]:.1f} s" for p in PHASES)
        ratio = f"{100 * r['tune_s'] / r['sweep_s']:.0f}%"
        lines.append(
            f"| {r['kind']} | {r['tune_s']:.1f} s | {r['sweep_s']:.1f} s | {ratio} | {r['trials']} | {cells} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("kinds", nargs="*", default=list(KINDS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            rows.append(one(kind, args.budget, Path(tmp)))
            print(f"{kind}: done", file=sys.stderr, flush=True)
    text = f"{machine()}; tune --budget {args.budget:g}s; sweep grid num_workers={GRID}\n\n{table(rows)}\n"
    print(text)
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "tune_time.md").write_text(text)


if __name__ == "__main__":
    main()
