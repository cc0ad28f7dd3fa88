"""Any launcher: `dlprobe run -- torchrun` (2 ranks x 4 workers, gloo on CPU) against plain torchrun, and what the
injected sitecustomize costs a Python process that never touches torch.

Alternates plain and probed runs (A B A B ...) and prints medians and ratios: each rank's throughput probed/plain,
the supervisor's CPU share (its CPU seconds over the run's wall time, and its share while the job ran) and peak
RSS, and the sitecustomize's import time (`python -X importtime -c pass`) and a bare `python -c pass` with and
without it.
Targets: throughput ratio >= 0.95; supervisor CPU <= 5% of a core; sitecustomize <= 1 ms with bytecode cached.
Usage: python benchmarks/launcher_overhead.py [--rounds N] [--batches N]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, median, run

REPO = Path(__file__).resolve().parents[1]
INJECTED = REPO / "dlprobe" / "in_training" / "injected"

JOB_SCRIPT = """
import sys, time
import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

class Work(Dataset):
    def __len__(self):
        return 1_000_000
    def __getitem__(self, i):
        x = np.random.default_rng(i).standard_normal(1024)
        return torch.from_numpy(np.sort(x)[:64].astype(np.float32))

if __name__ == "__main__":
    dist.init_process_group("gloo")
    batches = int(sys.argv[1])
    loader = DataLoader(Work(), batch_size=64, num_workers=4, sampler=DistributedSampler(Work()),
                        persistent_workers=True)
    it = iter(loader)
    for _ in range(10):  # warm up: workers started
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    rate = batches / (time.perf_counter() - start)
    print(f"throughput{dist.get_rank()} {rate}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
"""


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def torchrun(script: Path, batches: int) -> list[str]:
    return [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", free_port(),
            str(script), str(batches)]  # fmt: skip


def rates(stdout: str) -> list[float]:
    found = {line.split()[0]: float(line.split()[1]) for line in stdout.splitlines() if line.startswith("throughput")}
    return [found["throughput0"], found["throughput1"]]


def job(rounds: int, batches: int, tmp: Path) -> None:
    script = tmp / "job.py"
    script.write_text(JOB_SCRIPT)
    ratios, cpu_share, sampling_share, max_rss, plain_all, probed_all = [], [], [], [], [], []
    for i in range(rounds):
        plain = rates(run(torchrun(script, batches))[0].stdout)
        run_dir = tmp / f"job-{i}"
        proc, _ = run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir), "--",
                       *torchrun(script, batches)])  # fmt: skip
        probed = rates(proc.stdout)
        ratios += [p / q for p, q in zip(probed, plain, strict=True)]
        plain_all += plain
        probed_all += probed
        result = json.loads((run_dir / "result.json").read_text())
        meta = json.loads((run_dir / "meta.json").read_text())
        cpu_share.append(result["supervisor"]["cpu_s"] / (result["ended_at"] - meta["started_at"]))
        sampling_share.append(result["supervisor"]["cpu_share"])  # while the job ran: start-up's imports left out
        max_rss.append(result["supervisor"]["max_rss_bytes"] / 1e6)
    print(f"\ntorchrun, 2 ranks x 4 workers, {batches} batches per rank, {rounds} rounds")
    print(f"  throughput plain   median {median(plain_all):8.1f} batches/s per rank")
    print(f"  throughput probed  median {median(probed_all):8.1f} batches/s per rank")
    print(f"  ratio probed/plain median {median(ratios):8.3f}   (target >= 0.95)")
    print(f"  supervisor CPU     median {100 * median(cpu_share):8.2f} % of one core, start-up included")
    print(f"  while the job ran  median {100 * median(sampling_share):8.2f} % of one core   (target <= 5%)")
    print(f"  supervisor RSS     max    {max(max_rss):8.1f} MB")


def import_time_us(env: dict[str, str]) -> float:
    proc = subprocess.run([PYTHON, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True)
    for line in proc.stderr.splitlines():  # "import time:   self [us] | cumulative | name"
        fields = line.split("|")
        if len(fields) == 3 and fields[2].strip() == "sitecustomize":
            return float(fields[1])
    raise SystemExit(f"no sitecustomize line in python -X importtime's output:\n{proc.stderr[-1000:]}")


def sitecustomize(rounds: int, tmp: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    probed = {**base, "PYTHONPATH": str(INJECTED), "DLPROBE_RUN_DIR": str(tmp)}
    subprocess.run([PYTHON, "-c", "pass"], env=probed, check=True)  # write its bytecode once, as an install would
    without, with_, wall_without, wall_with = [], [], [], []
    for _ in range(rounds):
        without.append(import_time_us(base))
        with_.append(import_time_us(probed))
        for env, sink in ((base, wall_without), (probed, wall_with)):
            start = time.perf_counter()
            subprocess.run([PYTHON, "-c", "pass"], env=env, check=True)
            sink.append(time.perf_counter() - start)
    print(f"\nsitecustomize in a process that never imports torch, {rounds} rounds")
    print(f"  import time without  median {median(without) / 1000:6.2f} ms (the failed lookup alone)")
    print(f"  import time with     median {median(with_) / 1000:6.2f} ms   (target <= 1 ms)")
    print(f"  python -c pass       median {1000 * median(wall_without):6.1f} ms without, "
          f"{1000 * median(wall_with):6.1f} ms with")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300, help="batches timed per rank and run (after warm-up)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sitecustomize(max(args.rounds, 20), tmp)
        job(args.rounds, args.batches, tmp)


if __name__ == "__main__":
    main()
