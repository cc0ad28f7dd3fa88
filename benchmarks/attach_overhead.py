"""A training loop's throughput while `dlprobe attach` watches it, against the same loop unwatched.

Alternates rounds (A B A B ...) of one loader-bound script started as plain python: in A nothing watches it, in B
`dlprobe attach PID` runs for the whole measured loop (it samples /proc of the tree, and dumps each process's stack
with `py-spy dump --nonblocking` when it ends). The script warms up (every worker delivering), then waits for a go
file, so the attach is watching before the first measured batch; it times its own loop, so both sides are measured
the same way. Prints medians of the per-round throughput ratios and the attach's own CPU share.

Target (issue 23): throughput while attached unchanged within noise (ratio >= 0.98 at 2 and 8 workers).
Writes benchmarks/out/attach_overhead.json.
Usage: python benchmarks/attach_overhead.py [--rounds N] [--workers 2,8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric

OUT = Path(__file__).resolve().parent / "out"

LOADER_SCRIPT = """
import os, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

class Work(Dataset):
    def __len__(self):
        return 10_000_000
    def __getitem__(self, i):
        x = np.random.default_rng(i).standard_normal(2048)
        for _ in range(4):
            x = np.sort(x)[::-1].copy()
        return torch.from_numpy(x[:64].astype(np.float32))

if __name__ == "__main__":
    workers, batches, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    it = iter(DataLoader(Work(), batch_size=64, num_workers=workers, persistent_workers=True))
    for _ in range(2 * workers + 4):
        next(it)
    print("warm", flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    print("throughput", batches / (time.perf_counter() - start), flush=True)
"""


def one_round(script: Path, workers: int, batches: int, tmp: Path, attached: bool, i: int) -> dict[str, float]:
    go = tmp / f"go-{workers}-{i}-{int(attached)}"
    job = subprocess.Popen([PYTHON, str(script), str(workers), str(batches), str(go)], stdout=subprocess.PIPE,
                           text=True)  # fmt: skip
    assert job.stdout is not None
    assert job.stdout.readline() == "warm\n"
    watcher = None
    run_dir = tmp / f"attach-{workers}-{i}"
    if attached:
        watcher = subprocess.Popen([PYTHON, "-m", "dlprobe", "attach", str(job.pid), "--duration", "10m", "--out",
                                    str(run_dir)], stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert watcher.stderr is not None
        while "watching" not in watcher.stderr.readline():
            pass
    go.touch()
    out, _ = job.communicate(timeout=600)
    row = {"throughput": parse_metric(out, "throughput")}
    if watcher is not None:
        watcher.send_signal(signal.SIGINT)  # ends the window; the report is written from what was sampled
        watcher.communicate(timeout=300)
        sup = json.loads((run_dir / "result.json").read_text())["supervisor"]
        row["cpu_share"] = sup.get("cpu_share") or 0.0
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="2,8")
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "loader_bound.py"
        script.write_text(LOADER_SCRIPT)
        for workers in [int(w) for w in args.workers.split(",")]:
            ratios, shares = [], []
            for i in range(args.rounds):
                plain = one_round(script, workers, args.batches, tmp, False, i)
                watched = one_round(script, workers, args.batches, tmp, True, i)
                ratios.append(watched["throughput"] / plain["throughput"])
                shares.append(watched["cpu_share"])
            results[workers] = {"throughput_ratio": median(ratios), "ratio_min": min(ratios),
                                "ratio_max": max(ratios), "attach_cpu_share": median(shares)}  # fmt: skip
            r = results[workers]
            print(
                f"{workers} workers: throughput attached/plain {r['throughput_ratio']:.3f} ({r['ratio_min']:.2f}-"
                f"{r['ratio_max']:.2f}), attach CPU {100 * r['attach_cpu_share']:.2f}% of a core"
            )
    OUT.mkdir(exist_ok=True)
    payload = {"machine": machine(), "rounds": args.rounds, "time": time.time(), "results": results}
    (OUT / "attach_overhead.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"target: ratio >= 0.98; machine: {machine()}; pid {os.getpid()}")


if __name__ == "__main__":
    main()
