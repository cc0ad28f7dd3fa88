"""Training throughput with and without `dlprobe run`, plus the supervisor's own CPU and memory.

Alternates plain python and dlprobe runs (A B A B ...) on two loader-bound scripts and prints medians and
ratios. Targets: throughput ratio >= 0.98; supervisor CPU <= 5% of a core and peak RSS <= 80 MB with 4 workers of
~1 GB; every worker's USS read at least once a second.
Usage: python benchmarks/probe_overhead.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric, run

LOADER_SCRIPT = """
import sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

WORKER_MB = int(sys.argv[2])
BATCHES = int(sys.argv[3])
_ballast = []

def grow(_worker_id):
    # each worker keeps WORKER_MB of private, touched memory, like a worker holding a decoded cache
    if WORKER_MB:
        _ballast.append(np.ones(WORKER_MB * 1024 * 1024 // 8))

class Work(Dataset):
    def __len__(self):
        return 10_000_000
    def __getitem__(self, i):
        x = np.random.default_rng(i).standard_normal(2048)
        for _ in range(4):
            x = np.sort(x)[::-1].copy()
        return torch.from_numpy(x[:64].astype(np.float32))

if __name__ == "__main__":
    workers = int(sys.argv[1])
    loader = DataLoader(Work(), batch_size=64, num_workers=workers, worker_init_fn=grow, persistent_workers=True)
    it = iter(loader)
    for _ in range(10):   # warm up: workers started, memory allocated
        next(it)
    n, start = 0, time.perf_counter()
    for _ in range(BATCHES):
        next(it)
        n += 1
    print("throughput", n / (time.perf_counter() - start))
"""


def max_uss_gap(run_dir: Path) -> float:
    """The longest time between two USS readings of any worker while it was alive."""
    seen: dict[str, list[float]] = {}
    with (run_dir / "samples.jsonl").open() as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("k") == "s":
                for pid, vals in rec["p"].items():
                    if "uss" in vals:
                        seen.setdefault(pid, []).append(rec["t"])
    meta = json.loads((run_dir / "meta.json").read_text())
    workers = [ts for pid, ts in seen.items() if int(pid) != meta["target_pid"]]
    gaps = [b - a for ts in workers for a, b in zip(ts, ts[1:], strict=False)]
    return max(gaps, default=float("nan"))


def scenario(name: str, workers: int, worker_mb: int, rounds: int, tmp: Path, batches: int) -> None:
    script = tmp / "loader_bound.py"
    plain, probed, cpu_share, max_rss, gaps = [], [], [], [], []
    for i in range(rounds):
        proc, _ = run([PYTHON, str(script), str(workers), str(worker_mb), str(batches)])
        plain.append(parse_metric(proc.stdout, "throughput"))
        run_dir = tmp / f"{name}-{i}"
        proc, _ = run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir), str(script), str(workers),
                       str(worker_mb), str(batches)])  # fmt: skip
        probed.append(parse_metric(proc.stdout, "throughput"))
        result = json.loads((run_dir / "result.json").read_text())
        meta = json.loads((run_dir / "meta.json").read_text())
        wall = result["ended_at"] - meta["started_at"]
        cpu_share.append(result["supervisor"]["cpu_s"] / wall)
        max_rss.append(result["supervisor"]["max_rss_bytes"] / 1e6)
        gaps.append(max_uss_gap(run_dir))
    ratio = median([p / q for p, q in zip(probed, plain, strict=True)])
    print(f"\n{name}: {workers} workers x {worker_mb} MB, {rounds} rounds")
    print(f"  throughput plain   median {median(plain):8.1f} batches/s")
    print(f"  throughput probed  median {median(probed):8.1f} batches/s")
    print(f"  ratio probed/plain median {ratio:8.3f}   (target >= 0.98)")
    print(f"  supervisor CPU     median {100 * median(cpu_share):8.2f} % of one core   (target <= 5%)")
    print(f"  supervisor RSS     max    {max(max_rss):8.1f} MB during sampling   (target <= 80 MB)")
    print(f"  worker USS gap     max    {max(gaps):8.2f} s between readings   (target <= 1 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=3000, help="batches timed per run (after warm-up)")
    parser.add_argument("--only", type=int, choices=(1, 2, 3), help="run only this scenario")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "loader_bound.py").write_text(LOADER_SCRIPT)
        scenarios = [
            ("loader-bound, 2 small workers", 2, 0),
            ("loader-bound, 4 workers of ~1 GB", 4, 1000),
            ("loader-bound, 8 workers of ~200 MB", 8, 200),
        ]
        for number, (name, workers, worker_mb) in enumerate(scenarios, start=1):
            if args.only in (None, number):
                scenario(name, workers, worker_mb, args.rounds, tmp, args.batches)


if __name__ == "__main__":
    main()
