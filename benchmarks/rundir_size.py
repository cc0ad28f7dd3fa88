"""The run directory's size per day of training: measured on a real run, extrapolated, and the caps checked.

1. Reads a real run directory (default: records `dlprobe run` on a fast loader, 8 workers, batch size 1) and
   measures what each stream costs: bytes per batch of `batches` events and of workers' `worker_batches` rows, bytes
   per sampler reading (samples.jsonl), everything else (start-up, one-off events).
2. Drives the writers' own folding code with simulated hours at the batch rates given: the loop's waits through
   `in_training/wait_fold.WaitFolder` (chunks every 0.25 s, every 2 s once folded), the sampler's readings through
   `supervisor/sample_thinning.ReadingThinner` (the run's real readings, repeated, their USS moving as in the run),
   and workers' rows through `worker_batches.stride_after`; prints the bytes each writes per simulated hour, so
   the cap can be seen to hold (flat or log growth), and the extrapolated bytes per day.
Usage: python benchmarks/rundir_size.py [--rates 500,5000,50000] [--hours 6] [RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import machine, record_fast_run

from dlprobe.rundir.schema import SAMPLE_READING

MB = 1e6
TICKS_PER_HOUR = 4 * 3600


def _dumps(record: dict[str, Any]) -> int:
    return len(json.dumps(record, separators=(",", ":"))) + 1


def measure_run(run_dir: Path) -> dict[str, float]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    batches = sum(len(e.get("waits") or []) for e in events if e["ev"] == "batches")
    by_kind: dict[str, int] = {}
    for e in events:
        by_kind[e["ev"]] = by_kind.get(e["ev"], 0) + _dumps(e)
    rows = sum(len(e.get("rows") or []) for e in events if e["ev"] == "worker_batches")
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip()]
    readings = [s for s in samples if s.get("k") == SAMPLE_READING]
    return {
        "batches": batches,
        "batch_bytes": by_kind.get("batches", 0) / max(1, batches),
        "worker_row_bytes": by_kind.get("worker_batches", 0) / max(1, rows),
        "reading_bytes": sum(_dumps(r) for r in readings) / max(1, len(readings)),
        "processes": max((len(r.get("p") or {}) for r in readings), default=0),
        "once_bytes": sum(v for k, v in by_kind.items() if k not in ("batches", "worker_batches")),
        "readings": len(readings),
    }


def simulate_waits(rate: float, hours: float) -> list[float]:
    """MB the loop's `batches` events take after each simulated hour at `rate` batches/s (one loader)."""
    from dlprobe.in_training.wait_fold import WaitFolder
    from dlprobe.rundir.schema import FOLDED_FLUSH_S

    folder, total, out = WaitFolder(), 0, []
    per_chunk_unfolded = max(1, int(rate * 0.25))
    for _hour in range(int(hours)):
        done = 0
        while done < rate * 3600:
            chunk = int(rate * FOLDED_FLUSH_S) if folder.folded else per_chunk_unfolded
            left = chunk
            while left:  # the batches the folder would not keep, counted in bulk (hours in seconds); the rest added
                skip = min(left, -folder.seen % folder.stride)
                folder.n, folder.seen, left = folder.n + skip, folder.seen + skip, left - skip
                folder.wait_s += 0.0012 * skip
                folder.handover_s += 0.0004 * skip
                if left:
                    folder.add(0.0012, 0.0004, False)
                    left -= 1
            fields = folder.take() or {}
            total += _dumps({"ev": "batches", "t": 1795783974.6737835, "pid": 25898, "loader": 0, "epoch": 0,
                             "total": 10**9, **fields, "worker_batches": [10**8] * 8})  # fmt: skip
            done += chunk
        out.append(total / MB)
    return out


def simulate_readings(run_dir: Path, hours: float) -> list[float]:
    """MB samples.jsonl takes after each simulated hour: the run's readings repeated through the thinner."""
    from dlprobe.supervisor.sample_thinning import ReadingThinner

    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    readings = [row for row in (json.loads(line) for line in lines if line.strip()) if row.get("k") == SAMPLE_READING]
    thinner, total, out, i = ReadingThinner(), 0, [], 0
    for _hour in range(int(hours)):
        for _ in range(TICKS_PER_HOUR):
            row = readings[i % len(readings)]
            i += 1
            total += sum(_dumps(r) for r in thinner.add(row))
        out.append(total / MB)
    return out


def worker_rows(rate: float, hours: float, workers: int = 8) -> int:
    """Rows all workers keep over the hours at `rate` batches/s (the stride doubling per WORKER_BATCH_CAP)."""
    from dlprobe.rundir.schema import WORKER_BATCH_CAP

    per_worker = int(rate * 3600 * hours / workers)
    kept, stride, left = 0, 1, per_worker
    while left > 0:
        span = min(left, WORKER_BATCH_CAP * stride)
        kept += span // stride
        left -= span
        stride *= 2
    return kept * workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rates", default="500,5000,50000", help="batches per second to simulate")
    parser.add_argument(
        "--hours",
        type=int,
        default=6,
        help="whole hours to simulate (1 or more; the rest of the day is extrapolated from the last one)",
    )
    parser.add_argument("--batches", type=int, default=30000)
    parser.add_argument("run_dir", nargs="?", type=Path)
    args = parser.parse_args()
    if args.hours < 1:  # the folding is simulated hour by hour: under one there is no hour to extrapolate from
        parser.error(f"--hours must be 1 or more, not {args.hours}")
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir
        if run_dir is None:
            run_dir = record_fast_run(Path(tmp) / "run", args.batches, workers=8)
        m = measure_run(run_dir)
        print(f"real run: {m['batches']:,.0f} batches, {m['processes']:.0f} processes, {m['readings']:.0f} readings; "
              f"{m['batch_bytes']:.1f} B per batch (batches events), {m['worker_row_bytes']:.1f} B per worker row, "
              f"{m['reading_bytes']:,.0f} B per reading, {m['once_bytes'] / MB:.2f} MB once")  # fmt: skip
        readings = simulate_readings(run_dir, args.hours)
        print(f"samples.jsonl after each simulated hour (MB): {', '.join(f'{v:.1f}' for v in readings)}")
        per_hour_late = readings[-1] - readings[-2] if len(readings) > 1 else readings[-1]
        samples_day = readings[-1] + per_hour_late * (24 - args.hours)
        unthinned_day = m["reading_bytes"] * TICKS_PER_HOUR * 24 / MB
        print(f"samples.jsonl per day: {samples_day:.1f} MB (without the thinning {unthinned_day:.1f} MB)")
        print("\n| batches/s | batches events per day (MB) | unfolded (MB) | worker rows per day (MB) | "
              "samples (MB) | stderr.log at most (MB) | run dir per day (MB) |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for rate in (float(r) for r in args.rates.split(",")):
            waits = simulate_waits(rate, args.hours)
            late = waits[-1] - waits[-2] if len(waits) > 1 else waits[-1]
            waits_day = waits[-1] + late * (24 - args.hours)
            unfolded = m["batch_bytes"] * rate * 86400 / MB
            rows_day = worker_rows(rate, 24) * m["worker_row_bytes"] / MB
            total = waits_day + rows_day + samples_day + 1.05 + m["once_bytes"] / MB
            print(f"| {rate:,.0f} | {waits_day:.1f} (by hour: {', '.join(f'{v:.1f}' for v in waits)}) | "
                  f"{unfolded:,.0f} | {rows_day:.1f} | {samples_day:.1f} | 1.0 | {total:.0f} |")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
