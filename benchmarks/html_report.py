"""Cost and size of report.html: a synthetic long run (default one hour at 10 Hz, 8 workers) and saved run directories.

Writes a run directory of the size asked for (samples.jsonl grows ~50 MB per hour with 8 workers), then times
loading and analysing it (what `dlprobe report` pays anyway) against building and writing the page, and prints
the page's size. The page must stay bounded (~600 points per line, every event kept) whatever the length.
Usage: python benchmarks/html_report.py [--hours H] [--workers N] [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from _common import machine

MiB = 1024 * 1024


def write_long_run(path: Path, hours: float, workers: int, hz: float = 10.0) -> None:
    """meta, events (one epoch a minute, batches every second) and samples like a real run's."""
    path.mkdir(parents=True, exist_ok=True)
    t0 = 1_000_000.0
    main, pids = 1000, [1001 + w for w in range(workers)]
    (path / "meta.json").write_text(json.dumps({"schema_version": 2, "script": "train.py", "argv": [],
        "started_at": t0, "target_pid": main, "machine": {"host": "bench"}}))  # fmt: skip
    n = int(hours * 3600 * hz)
    rng = random.Random(0)
    with (path / "events.jsonl").open("w") as ev:
        ev.write(json.dumps({"ev": "loader", "t": t0 + 1, "pid": main, "loader": 0, "num_workers": workers}) + "\n")
        for minute in range(int(hours * 60)):
            t = t0 + 2 + minute * 60
            ws = [{"pid": p, "worker_id": i} for i, p in enumerate(pids)] if minute == 0 else []
            ev.write(json.dumps({"ev": "epoch", "t": t, "pid": main, "loader": 0, "epoch": minute, "iter_s": 0.01,
                                 "workers": ws}) + "\n")  # fmt: skip
            for second in range(1, 60):
                waits = [round(rng.random() * 0.01, 5) for _ in range(20)]
                ev.write(json.dumps({"ev": "batches", "t": t + second, "pid": main, "loader": 0, "epoch": minute,
                                     "waits": waits}) + "\n")  # fmt: skip
    with (path / "samples.jsonl").open("w") as s:
        for pid in [main, *pids]:
            s.write(json.dumps({"k": "proc", "pid": pid, "ppid": 1, "comm": "python"}) + "\n")
        for i in range(n):
            t = t0 + i / hz
            p = {str(pid): {"rss": 300 * MiB + i, "uss": 50 * MiB + i * 100, "pss": 80 * MiB + i * 50, "swap": 0,
                            "anon": 40 * MiB, "private_dirty": 45 * MiB + i * 100, "private_clean": MiB,
                            "pss_anon": 40 * MiB + i * 50, "pss_file": 10 * MiB, "pss_shmem": 1024}
                 for pid in [main, *pids]}  # fmt: skip
            s.write(json.dumps({"k": "s", "t": t, "p": p, "shm": {"used": 10 * MiB, "total": 8 * 1024 * MiB},
                                "avail": 20 * 1024 * MiB, "cg": {}}) + "\n")  # fmt: skip
    (path / "result.json").write_text(json.dumps({"exit_code": 0, "ended_at": t0 + hours * 3600}))


def measure(run_dir: Path) -> None:
    from dlprobe.analysis.report.build import report_for
    from dlprobe.analysis.report.timeline import timeline_from_run
    from dlprobe.render.html import write_html

    start = time.perf_counter()
    run, report = report_for(run_dir)
    analysed = time.perf_counter() - start
    start = time.perf_counter()
    timeline = timeline_from_run(run)
    out = run_dir / "report.html"
    write_html(out, report, timeline)
    page_s = time.perf_counter() - start
    size = (run_dir / "samples.jsonl").stat().st_size if (run_dir / "samples.jsonl").exists() else 0
    print(f"{run_dir.name}: samples.jsonl {size / MiB:,.1f} MiB; load+analyse {analysed:.2f} s; "
          f"page {page_s:.3f} s ({page_s / max(analysed, 1e-9):.1%} of load+analyse); "
          f"report.html {out.stat().st_size / 1024:,.0f} KiB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("run_dirs", nargs="*", type=Path)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for run_dir in args.run_dirs:
        measure(run_dir)
    with tempfile.TemporaryDirectory() as tmp:
        long_run = Path(tmp) / f"synthetic-{args.hours:g}h-{args.workers}w"
        write_long_run(long_run, args.hours, args.workers)
        measure(long_run)


if __name__ == "__main__":
    main()
