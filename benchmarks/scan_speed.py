"""How fast `dlprobe scan` checks a dataset compared with iterating it with a plain DataLoader.

Both sides use the same synthetic dataset and the same number of worker processes, and are timed from the
start of iteration to its end (so neither pays for Python or torch start-up): the plain side inside its own
script, the scan side as the `duration_s` that `dlprobe scan --json` records. Runs alternate A B A B so that
drift in machine load hits both alike; the medians and their ratio are printed. On a busy machine wall time
swings with other load, so the CPU seconds of each run's whole process tree (start-up included) are printed too,
and `--together` runs each pair at the same time instead, so that both meet the same load.

    python benchmarks/scan_speed.py --samples 4000 --workers 2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

DATASET_SCRIPT = '''
import json, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

SAMPLES, WORK, WORKERS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


class Synthetic(Dataset):
    """Each sample costs some CPU like a decode: a few convolutions over a 3x64x64 image."""

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.rand(1, 3, 64, 64, generator=g)
        for _ in range(WORK):
            image = torch.nn.functional.avg_pool2d(image, 3, stride=1, padding=1)
        return image[0], i % 10


loader = DataLoader(Synthetic(), batch_size=32, num_workers=WORKERS)
started = time.perf_counter()
count = 0
for images, labels in loader:
    count += len(labels)
print(json.dumps({"seconds": time.perf_counter() - started, "samples": count}))
'''


def start_plain(script: Path, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)


def plain_seconds(proc: subprocess.Popen[str]) -> float:
    stdout, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the plain DataLoader run failed ({proc.returncode})")
    return float(json.loads(stdout.strip().splitlines()[-1])["seconds"])


def start_scan(script: Path, args: list[str], workers: int, out: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "dlprobe", "scan", "-q", "--workers", str(workers), "--json", str(out)]
    return subprocess.Popen([*command, str(script), *args], stderr=subprocess.PIPE, text=True, env=env)


def scan_seconds(proc: subprocess.Popen[str], args: list[str], out: Path) -> float:
    _, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"dlprobe scan failed ({proc.returncode}):\n{stderr}")
    result = json.loads(out.read_text())
    assert result["scanned"] == int(args[0]) and not result["bad"], result
    return float(result["duration_s"])


def children_cpu_s() -> float:
    """CPU seconds of every finished descendant so far (workers are waited for, so they count)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--work", type=int, default=4, help="convolutions per sample (0: almost free samples)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--together", action="store_true", help="run each plain/scan pair at the same time")
    options = parser.parse_args()
    args = [str(options.samples), str(options.work), str(options.workers)]
    plain_s: list[float] = []
    scan_s: list[float] = []
    plain_cpu: list[float] = []
    scan_cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "synthetic_dataset.py"
        script.write_text(DATASET_SCRIPT)
        for round_number in range(1, options.rounds + 1):
            out = Path(tmp) / "scan.json"
            if options.together:  # CPU time cannot be told apart when both run at once
                plain_proc, scan_proc = start_plain(script, args), start_scan(script, args, options.workers, out)
                plain_s.append(plain_seconds(plain_proc))
                scan_s.append(scan_seconds(scan_proc, args, out))
            else:
                cpu = children_cpu_s()
                plain_s.append(plain_seconds(start_plain(script, args)))
                plain_cpu.append(children_cpu_s() - cpu)
                cpu = children_cpu_s()
                scan_s.append(scan_seconds(start_scan(script, args, options.workers, out), args, out))
                scan_cpu.append(children_cpu_s() - cpu)
            cpu_note = (
                ("", "") if options.together else (f" (cpu {plain_cpu[-1]:.2f} s)", f" (cpu {scan_cpu[-1]:.2f} s)")
            )
            print(
                f"round {round_number}: plain {plain_s[-1]:.2f} s{cpu_note[0]}   scan {scan_s[-1]:.2f} s{cpu_note[1]}",
                flush=True,
            )
    plain, scan = statistics.median(plain_s), statistics.median(scan_s)
    setup = f"{options.samples} samples, work {options.work}, {options.workers} workers"
    print(f"\n{setup}, {options.rounds} rounds ({'side by side' if options.together else 'A B A B'})")
    print(f"plain DataLoader: median {plain:.2f} s = {options.samples / plain:,.0f} samples/s")
    print(f"dlprobe scan:     median {scan:.2f} s = {options.samples / scan:,.0f} samples/s")
    print(f"scan throughput / plain throughput = {plain / scan:.2f}  (target >= 0.90)")
    if not options.together:
        print(
            f"CPU seconds per run, whole process tree: plain {statistics.median(plain_cpu):.2f}, "
            f"scan {statistics.median(scan_cpu):.2f} (scan starts one more Python process, without torch)"
        )


if __name__ == "__main__":
    main()
