"""A torchrun job (2 ranks x 4 workers, gloo on CPU) with and without `dlprobe run --`: throughput, the
supervisor's CPU share and memory, and how long the job report takes.

Alternates plain torchrun and dlprobe runs (A B A B ...) and prints medians and ratios. Targets: throughput ratio
>= 0.95; supervisor CPU <= 5% of one core for the whole tree (launcher + 2 ranks + 8 workers).
Usage: python benchmarks/job_supervisor.py [--rounds N] [--batches N]
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, median, run

JOB_SCRIPT = """
import sys, time
import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

class Work(Dataset):
    def __len__(self):
        return 10_000_000
    def __getitem__(self, i):
        x = np.random.default_rng(i).standard_normal(2048)
        for _ in range(4):
            x = np.sort(x)[::-1].copy()
        return torch.from_numpy(x[:64].astype(np.float32))

if __name__ == "__main__":
    dist.init_process_group("gloo")
    batches = int(sys.argv[1])
    loader = DataLoader(Work(), batch_size=64, num_workers=4, sampler=DistributedSampler(Work()))
    it = iter(loader)
    for _ in range(10):   # warm up: workers started
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(it)
        dist.all_reduce(batch.sum().reshape(1))
    rate = torch.tensor([batches / (time.perf_counter() - start)])
    dist.all_reduce(rate)
    if dist.get_rank() == 0:
        print("throughput", rate.item(), flush=True)
    dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun(script: Path, batches: int) -> list[str]:
    return [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
            "--master-port", str(free_port()), str(script), str(batches)]  # fmt: skip


def throughput(stdout: str) -> float:
    return float(next(line.split()[1] for line in stdout.splitlines() if line.startswith("throughput ")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=400, help="batches per rank timed per run (after warm-up)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    plain, probed, cpu_share, max_rss, report_s = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "job.py"
        script.write_text(JOB_SCRIPT)
        for i in range(args.rounds):
            proc, _ = run(torchrun(script, args.batches), cwd=tmp)
            plain.append(throughput(proc.stdout))
            run_dir = tmp / f"job-{i}"
            cmd = [
                PYTHON,
                "-m",
                "dlprobe",
                "run",
                "--quiet",
                "--out",
                str(run_dir),
                "--",
                *torchrun(script, args.batches),
            ]
            proc, _ = run(cmd, cwd=tmp)
            probed.append(throughput(proc.stdout))
            result = json.loads((run_dir / "result.json").read_text())
            meta = json.loads((run_dir / "meta.json").read_text())
            cpu_share.append(result["supervisor"]["cpu_s"] / (result["ended_at"] - meta["started_at"]))
            max_rss.append(result["supervisor"]["max_rss_bytes"] / 1e6)
            start = time.perf_counter()
            run([PYTHON, "-m", "dlprobe", "report", str(run_dir)], cwd=tmp)
            report_s.append(time.perf_counter() - start)
            ranks = json.loads((run_dir / "report.json").read_text()).get("ranks") or []
            assert [r["workers"] for r in ranks] == [4, 4], ranks  # the job really was 2 ranks x 4 workers
    ratio = median([p / q for p, q in zip(probed, plain, strict=True)])
    print(f"\ntorchrun 2 ranks x 4 workers, {args.rounds} rounds, {args.batches} batches per rank")
    print(f"  throughput plain   median {median(plain):8.1f} batches/s per rank")
    print(f"  throughput probed  median {median(probed):8.1f} batches/s per rank")
    print(f"  ratio probed/plain median {ratio:8.3f}   (target >= 0.95)")
    print(f"  supervisor CPU     median {100 * median(cpu_share):8.2f} % of one core   (target <= 5%)")
    print(f"  supervisor RSS     max    {max(max_rss):8.1f} MB")
    print(f"  dlprobe report     median {median(report_s):8.2f} s for the job report")


if __name__ == "__main__":
    main()
