"""`dlprobe report` time against the run's length: a real short run scaled to 1x, 10x and 100x its batches.

Records a real run (`dlprobe run` on a fast loader: tiny samples, batch size 1) once, or takes a saved one, then
writes run directories that repeat its recorded epoch k times end to end: every `batches`, `worker_batches` and
sampler reading is copied with its time shifted by the run's length, so the events are the real writer's, only more
of them (the directory holds what a k times longer epoch would; nothing is folded, the worst case for the report).
Times `python -m dlprobe report DIR` on each (a fresh process: load, analyse, report.json, report.html, trace.json)
and prints the seconds, the seconds per million batches and the ratio to 1x.
Usage: python benchmarks/report_scale.py [--scales 1,10,100] [--batches 20000] [--profile] [RUN_DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, record_fast_run, run

HERE = Path(__file__).resolve().parent
REPEATED_EVENTS = ("batches", "worker_batches", "dupes")


def record_real_run(out: Path, batches: int) -> Path:
    return record_fast_run(out, batches, workers=2)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scale_run(source: Path, dest: Path, k: int) -> int:
    """`source`'s epoch repeated k times in `dest`; returns its batches."""
    dest.mkdir(parents=True)
    for name in ("meta.json", "result.json", "kernel.json", "stacks.txt", "stacks.json"):
        if (source / name).exists():
            shutil.copy(source / name, dest / name)
    events = _lines(source / "events.jsonl")
    samples = _lines(source / "samples.jsonl")
    repeated = [e for e in events if e["ev"] in REPEATED_EVENTS]
    first = min(float(e["t"]) for e in repeated)  # type: ignore[arg-type]
    last = max(float(e["t"]) for e in repeated)  # type: ignore[arg-type]
    span = last - first + 0.25
    readings = [s for s in samples if s.get("k") == "s" and first <= float(s["t"]) <= last]  # type: ignore[arg-type]
    batches = 0
    with (dest / "events.jsonl").open("w") as out:
        copied = False
        for event in events:
            if event["ev"] in REPEATED_EVENTS:
                if copied:
                    continue
                copied = True  # the epoch's batches, k times, where its first one was
                for i in range(k):
                    for copy in repeated:
                        moved = dict(copy, t=float(copy["t"]) + i * span)  # type: ignore[arg-type]
                        if copy["ev"] == "batches":
                            batches += len(copy.get("waits") or [])  # type: ignore[arg-type]
                            moved["total"] = batches
                        if copy["ev"] == "worker_batches":
                            moved["t0"] = float(copy["t0"]) + i * span  # type: ignore[arg-type]
                        out.write(json.dumps(moved) + "\n")
                continue
            if float(event["t"]) > last:  # type: ignore[arg-type]  # the epoch's end and what follows move past them
                event = dict(event, t=float(event["t"]) + (k - 1) * span)  # type: ignore[arg-type]
            out.write(json.dumps(event) + "\n")
    with (dest / "samples.jsonl").open("w") as out:
        for sample in samples:
            if sample.get("k") == "s" and float(sample["t"]) > first:  # type: ignore[arg-type]
                continue
            out.write(json.dumps(sample) + "\n")
        for i in range(k):
            for reading in readings:
                out.write(json.dumps(dict(reading, t=float(reading["t"]) + i * span)) + "\n")  # type: ignore[arg-type]
        for sample in samples:
            if sample.get("k") == "s" and float(sample["t"]) > last:  # type: ignore[arg-type]
                out.write(json.dumps(dict(sample, t=float(sample["t"]) + (k - 1) * span)) + "\n")  # type: ignore[arg-type]
    return batches


def time_report(run_dir: Path) -> float:
    start = time.perf_counter()
    run([PYTHON, "-m", "dlprobe", "report", str(run_dir), "--trace", str(run_dir / "trace.json")], timeout=3600)
    return time.perf_counter() - start


def profile_report(run_dir: Path) -> None:
    from dlprobe.commands.outputs import write_outputs

    profile = cProfile.Profile()
    profile.runcall(write_outputs, run_dir, None)
    pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", default="1,10,100")
    parser.add_argument("--batches", type=int, default=20000, help="batches of the real run recorded")
    parser.add_argument("--profile", action="store_true", help="cProfile the report of the largest scale")
    parser.add_argument("run_dir", nargs="?", type=Path, help="a saved run to scale instead of recording one")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        source = args.run_dir or record_real_run(Path(tmp) / "real", args.batches)
        rows = []
        for k in (int(s) for s in args.scales.split(",")):
            dest = Path(tmp) / f"x{k}"
            batches = scale_run(source, dest, k)
            size = sum(f.stat().st_size for f in dest.iterdir() if f.is_file())
            if args.profile and k == max(int(s) for s in args.scales.split(",")):
                profile_report(dest)
            seconds = time_report(dest)
            rows.append((k, batches, size, seconds))
            print(f"x{k}: {batches:,} batches, {size / 1e6:,.1f} MB, report {seconds:.2f} s", flush=True)
    base = rows[0]
    print("\n| scale | batches | run dir (MB) | `dlprobe report` (s) | s per million batches | time / 1x |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, batches, size, seconds in rows:
        per_m = seconds / batches * 1e6
        print(f"| {k}x | {batches:,} | {size / 1e6:,.1f} | {seconds:.2f} | {per_m:.1f} | {seconds / base[3]:.1f} |")


if __name__ == "__main__":
    main()
