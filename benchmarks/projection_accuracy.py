"""How well cow-growth's epoch projection (loader_model/memory_growth.py) predicts the workers' memory at the end.

Each loader of benchmarks/_growth_loaders.py (leaky: a list of dicts, a dict, a cache that fills; healthy: a load at
start, numpy features) runs one epoch under `dlprobe run`, ROUNDS times. Each run is then read as if it had been
stopped at 10%, 25% and 50% of its epoch: its events.jsonl and samples.jsonl cut at the time the loop had taken that
share of the epoch's batches (what a run stopped there would have written: the events of its epoch's end and the
workers' last readings left out), and every worker's growth projected to the end (worker_growth.worker_projection:
held at start + copies + new allocations, each bent toward its ceiling). The projection, summed over the workers, is
compared with what the same workers measured at the end of the full run (the same function on the whole run: the epoch
ended, nothing projected).

error: projected / measured - 1, where the end grew at least FLOOR_MIB in all (else the error in MiB: a few MiB of
start-up noise make no percentage). spread: between the ROUNDS runs' projections at the same point, (max - min) /
mean. Goals (issue 35): error within 15% from 25% of the epoch on and never below -15%; spread within 15%.
Writes benchmarks/out/projection_accuracy.json.
Usage: python benchmarks/projection_accuracy.py [--shapes list-of-dicts,dict,cache,load-at-start,healthy]
       [--rounds 2] [--scale 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _common import PYTHON, machine, run

from dlprobe.analysis.measures.worker_growth import worker_projection
from dlprobe.analysis.run.model import RunData, load_run
from dlprobe.rundir.schema import EV_BATCHES, EVENTS_FILE, SAMPLES_FILE

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
CUTS = (0.10, 0.25, 0.50)
FLOOR_MIB = 32.0
MiB = 1 << 20
# shape: (records, seconds per step): about 30 s an epoch on an idle 2-core machine, 2 workers
SHAPES = {
    "list-of-dicts": ("400000", "0.015"),
    "dict": ("300000", "0.02"),
    "cache": ("160000", "0.03"),
    "load-at-start": ("100000", "0.05"),
    "healthy": ("100000", "0.05"),
}


def _workers_total(data: RunData) -> tuple[int, float]:
    """Every worker of the run's loaders, projected to the end of its epoch, together; and the earliest share of the
    epoch a worker was measured at."""
    total, at = 0, 1.0
    for loader in data.loaders:
        for proc in data.workers(loader.loader_id):
            if proc.memory_unread is not None:
                continue
            p = worker_projection(data, loader, proc)
            total += p.projected_bytes
            parts = [x for x in (p.copies, p.allocations) if x is not None]
            at = min([at, *(x.measured_at for x in parts)])
    return total, at


def _cut_time(data: RunData, share: float) -> float:
    """When the loop had taken `share` of its (only) epoch's batches: the first `batches` event reporting that many
    (batches are reported in groups, a few a second)."""
    epoch = data.loaders[0].epochs[0]
    assert epoch.t_end is not None, "the run did not finish its epoch"
    reported = sorted(
        (float(e["t"]), int(e["total"]))
        for e in data.events
        if e.get("ev") == EV_BATCHES and e.get("loader") == 0 and e.get("epoch") == epoch.epoch
    )
    return next(t for t, total in reported if total >= share * epoch.batches)


def _cut(run_dir: Path, until: float, into: Path) -> Path:
    """A copy of the run directory as a run stopped at `until` would have left it (records after it removed)."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(run_dir, into, symlinks=True)
    for name in (EVENTS_FILE, SAMPLES_FILE):
        kept = [line for line in (run_dir / name).read_text().splitlines()
                if line.strip() and json.loads(line).get("t", 0.0) <= until]  # fmt: skip
        (into / name).write_text("\n".join(kept) + "\n")
    return into


def _error(projected: int, measured: int) -> dict[str, Any]:
    if measured >= FLOOR_MIB * MiB:
        return {"error": round(projected / measured - 1, 3)}
    return {"error_mib": round((projected - measured) / MiB, 1)}


def measure(shape: str, rounds: int, work: Path, scale: float = 1.0) -> dict[str, Any]:
    records, step = SHAPES[shape]
    records = str(int(int(records) * scale))
    runs = []
    for r in range(rounds):
        out = work / f"{shape}-{r}"
        if not (out / "report.json").exists():  # --work: a run already made is read again, not run again
            run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(out), str(HERE / "_growth_loaders.py"), shape,
                 records, step], timeout=900)  # fmt: skip
        full = load_run(out)
        end, _ = _workers_total(full)
        row: dict[str, Any] = {"measured_end_bytes": end, "cuts": {}}
        for share in CUTS:
            cut = load_run(_cut(out, _cut_time(full, share), work / f"{shape}-{r}-cut"))
            projected, at = _workers_total(cut)
            row["cuts"][str(share)] = {"projected_bytes": projected, "measured_at": round(at, 3),
                                       **_error(projected, end)}  # fmt: skip
        runs.append(row)
    spread = {}
    for share in CUTS:
        values = [r["cuts"][str(share)]["projected_bytes"] for r in runs]
        mean = statistics.mean(values)
        spread[str(share)] = round((max(values) - min(values)) / mean, 3) if mean >= FLOOR_MIB * MiB else None
    return {"shape": shape, "runs": runs, "spread": spread}


def _cell(cut: dict[str, Any]) -> str:
    if "error" in cut:
        return f"{100 * cut['error']:+.0f}%"
    return f"{cut['error_mib']:+.0f} MiB"


def table(results: list[dict[str, Any]]) -> str:
    head = "| loader | measured at the end | " + " | ".join(f"error at {100 * c:.0f}%" for c in CUTS) + (
        " | spread at 25% | spread at 50% |")  # fmt: skip
    lines = [head, "|" + " --- |" * (2 + len(CUTS) + 2)]
    for res in results:
        ends = ", ".join(f"{r['measured_end_bytes'] / MiB:.0f}" for r in res["runs"])
        cells = [", ".join(_cell(r["cuts"][str(c)]) for r in res["runs"]) for c in CUTS]
        spreads = [("-" if (s := res["spread"][str(c)]) is None else f"{100 * s:.0f}%") for c in (0.25, 0.5)]
        lines.append(f"| {res['shape']} | {ends} MiB | " + " | ".join(cells) + " | " + " | ".join(spreads) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="records (and so the epoch's length) times this")
    parser.add_argument("--work", type=Path, help="keep the runs here (and read them again if there)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="dlprobe-projection-") as tmp:
        for shape in args.shapes.split(","):
            results.append(measure(shape, args.rounds, args.work or Path(tmp), args.scale))
            print(table(results[-1:]), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "projection_accuracy.json").write_text(json.dumps({"machine": machine(), "results": results}, indent=1))
    print(f"\n{machine()}\n\n{table(results)}")


if __name__ == "__main__":
    main()
