"""Helpers shared by the benchmarks: run commands, alternate A/B rounds, print medians and ratios."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

PYTHON = sys.executable


def machine() -> str:
    cpus = len(os.sched_getaffinity(0))
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return f"{platform.processor() or platform.machine()}, {cpus} cores, {mem_kb / 1024**2:.0f} GiB, " \
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"  # fmt: skip


def require_py_spy() -> str:
    """py-spy's path, or exit: the hotspot benchmarks measure it."""
    from dlprobe.system.pyspy import find_py_spy

    exe = find_py_spy()
    if exe is None:
        raise SystemExit("py-spy not found")
    return exe


def run(
    cmd: list[str], cwd: Path | None = None, timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return proc, elapsed


def children(pid: int) -> list[int]:
    """The direct children of `pid` (not grandchildren: a forked worker carries its parent's command line)."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def parse_metric(stdout: str, name: str) -> float:
    for line in stdout.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise SystemExit(f"no '{name}' line in output:\n{stdout[-1000:]}")


# A loader as fast as a DataLoader gets (one int per batch): argv[1] batches over argv[2] workers. What a run
# directory records per batch, worker row and reading is measured on it (report_scale.py, rundir_size.py).
FAST_LOADER = """
import sys
from torch.utils.data import DataLoader, Dataset

class Tiny(Dataset):
    def __len__(self):
        return int(sys.argv[1])

    def __getitem__(self, i):
        return i

for batch in DataLoader(Tiny(), batch_size=1, num_workers=int(sys.argv[2])):
    pass
"""


def record_fast_run(out: Path, batches: int, workers: int) -> Path:
    """`dlprobe run` of FAST_LOADER into `out` (the script is written beside it)."""
    script = out.parent / "fast_loader.py"
    script.write_text(FAST_LOADER)
    run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(out), str(script), str(batches), str(workers)])
    return out
