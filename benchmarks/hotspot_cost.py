"""What the hotspot sampler's py-spy costs the machine: the whole tree at once (before) against one worker at a time.

Runs probe_overhead's loader-bound script plain (no dlprobe) with 2 and 8 workers, and while it loads, alternates
the two ways of sampling it for the same span, measuring py-spy's own CPU time (user + system, from wait4):
- tree: `py-spy record --pid MAIN --subprocesses --nonblocking --idle --rate 10` (dlprobe up to this change),
- turns: `py-spy record --pid WORKER --nonblocking --idle --rate 20 --duration 2`, the workers in turn (now).
CPU seconds are a count, not a timing: other load on the machine barely moves them, unlike throughput ratios.
Writes benchmarks/out/hotspot_cost.json.
Usage: python benchmarks/hotspot_cost.py [--rounds 3] [--workers 2,8] [--span 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PYTHON, children, machine, median, require_py_spy
from probe_overhead import LOADER_SCRIPT

from dlprobe.supervisor.stack_recorder import BURST_S, DEFAULT_RATE

OUT = Path(__file__).resolve().parent / "out"
TREE_RATE = 10  # the rate dlprobe's whole-tree sampler used


def spy(command: list[str]) -> tuple[float, int]:
    """py-spy's CPU seconds and the samples it wrote (thread samples, all threads of the process)."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    out = Path(command[command.index("--output") + 1])
    lines = out.read_text(errors="replace").splitlines() if out.exists() else []
    return usage.ru_utime + usage.ru_stime, sum(int(line.rpartition(" ")[2]) for line in lines if line.strip())


def sample_tree(py_spy: str, main: int, span: int, out: Path) -> tuple[float, int]:
    return spy([py_spy, "record", "--pid", str(main), "--subprocesses", "--nonblocking", "--idle", "--rate",
                str(TREE_RATE), "--duration", str(span), "--format", "raw", "--output", str(out)])  # fmt: skip


def sample_turns(py_spy: str, workers: list[int], span: int, out: Path) -> tuple[float, int]:
    cpu, samples = 0.0, 0
    for burst in range(max(1, span // BURST_S)):
        pid = workers[burst % len(workers)]
        c, n = spy([py_spy, "record", "--pid", str(pid), "--nonblocking", "--idle", "--rate", str(DEFAULT_RATE),
                    "--duration", str(BURST_S), "--format", "raw", "--output", str(out)])  # fmt: skip
        cpu, samples = cpu + c, samples + n
    return cpu, samples


def scenario(py_spy: str, workers: int, rounds: int, span: int, tmp: Path) -> dict[str, float]:
    script = tmp / "loader_bound.py"
    # enough batches for every round of both modes, whatever the load
    proc = subprocess.Popen([PYTHON, str(script), str(workers), "1000000", "4"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.time() + 120
        while len(children(proc.pid)) < workers and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # the workers loading
        kids = children(proc.pid)  # the DataLoader's workers
        rows = []
        for i in range(rounds):
            modes = ("tree", "turns") if i % 2 == 0 else ("turns", "tree")
            row: dict[str, float] = {}
            for mode in modes:
                t0 = time.perf_counter()
                if mode == "tree":
                    cpu, n = sample_tree(py_spy, proc.pid, span, tmp / "tree.txt")
                else:
                    cpu, n = sample_turns(py_spy, kids[:workers], span, tmp / "turns.txt")
                wall = time.perf_counter() - t0
                row[f"{mode}_cpu_share"], row[f"{mode}_samples"] = cpu / wall, n
            rows.append(row)
            print(f"  {workers} workers, round {i}: {row}", flush=True)
    finally:
        proc.kill()
        proc.wait()
    return {key: median([r[key] for r in rows]) for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="2,8")
    parser.add_argument("--span", type=int, default=6, help="seconds each mode samples per round (whole seconds)")
    args = parser.parse_args()
    py_spy = require_py_spy()
    print(f"machine: {machine()}; load {os.getloadavg()}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "loader_bound.py").write_text(LOADER_SCRIPT.replace("for _ in range(batches):", "while True:"))
        for workers in (int(w) for w in args.workers.split(",")):
            results[workers] = scenario(py_spy, workers, args.rounds, args.span, tmp)
    print(f"\nmedians of {args.rounds} alternating rounds; py-spy's CPU as a share of one core while it samples")
    print(f"workers | tree {TREE_RATE} Hz (before) | one at a time {DEFAULT_RATE} Hz (now) | ratio")
    for workers, r in results.items():
        print(f"{workers:7d} | {100 * r['tree_cpu_share']:5.2f} % | {100 * r['turns_cpu_share']:5.2f} % | "
              f"{r['turns_cpu_share'] / r['tree_cpu_share']:.2f}")  # fmt: skip
    print(f"load after: {os.getloadavg()}")
    OUT.mkdir(exist_ok=True)
    (OUT / "hotspot_cost.json").write_text(json.dumps({"machine": machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
