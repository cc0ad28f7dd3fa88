"""Start-method readiness: the per-worker copy and start-up the report predicts for forkserver and spawn, against what
the same loader measures when it really starts its workers that way (issue 37; goal: within 25%).

Loaders of several shapes (a list of records, a numpy array, a memory-mapped .npy file, an open h5py handle, and an
empty dataset as the baseline) each run under `dlprobe run` with `multiprocessing_context` set to fork, forkserver
and spawn in the benchmark's script. From each run directory:

- predicted: the `start_readiness` event (written before the workers start): `copy_bytes`, and the start-up per
  worker for that method (analysis/findings/start_method.py:predicted_start_s);
- measured copy: each worker's USS in its own `worker_start` event (after its copy is unpickled), less the same
  reading for the empty dataset under the same method (the interpreter and torch every worker has);
- measured start-up: the slowest worker's `worker_start` event against the start of the iterator that made it.

Under fork the prediction is 0 copy and 0 s: the table gives the measured values. The handle shape is predicted not
to start under forkserver and spawn; the table says whether it did.
Usage: python benchmarks/start_method_readiness.py [--mib 128] [--records 300000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlprobe.analysis.findings.start_method import (  # noqa: E402
    predicted_start_s,
    start_work_s,
    starts_in_turn,
    worker_share,
)

MiB = 1024 * 1024
SHAPES = ("empty", "records", "arrays", "mmap", "handle")
METHODS = ("fork", "forkserver", "spawn")

SCRIPT = """
import sys
import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Shape(Dataset):
    def __init__(self, shape, mib, records, folder):
        if shape == "records":
            self.data = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 1000} for i in range(records)]
        elif shape == "arrays":
            self.data = np.random.default_rng(0).random(mib * MIB // 4, dtype=np.float32)
        elif shape == "mmap":
            np.save(f"{folder}/table.npy", np.ones(mib * MIB // 4, dtype=np.float32))
            self.data = np.load(f"{folder}/table.npy", mmap_mode="r")
        elif shape == "handle":
            with h5py.File(f"{folder}/rows.h5", "w") as f:
                f.create_dataset("x", data=np.ones((256, 16), dtype=np.float32))
            self.data = h5py.File(f"{folder}/rows.h5", "r")["x"]
        else:
            self.data = [0]

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i)])  # the copy is made as the worker unpickles the dataset, not by reading it


MIB = 1024 * 1024

if __name__ == "__main__":
    shape, method, mib, records, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    loader = DataLoader(Shape(shape, mib, records, folder), batch_size=8, num_workers=2,
                        multiprocessing_context=method)
    print("total", sum(float(b.sum()) for b in loader))
"""


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def one(shape: str, method: str, mib: int, records: int, folder: Path) -> dict:
    script = folder / "shape_loader.py"
    script.write_text(SCRIPT)
    run_dir = folder / f"run-{shape}-{method}"
    cmd = [sys.executable, "-m", "dlprobe", "run", "--out", str(run_dir), str(script), shape, method, str(mib),
           str(records), str(folder)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})
    evs = events(run_dir)
    ready = next((e for e in evs if e.get("ev") == "start_readiness"), None)
    epoch = next((e for e in evs if e.get("ev") == "epoch" and e.get("pid") == (ready or {}).get("pid")), None)
    starts = [e for e in evs if e.get("ev") == "worker_start"]
    row: dict = {"shape": shape, "method": method, "exit": proc.returncode, "ready": ready}
    if epoch is not None and starts:
        t0 = float(epoch["t"]) - float(epoch.get("iter_s") or 0.0)
        pids = {w["pid"] for w in epoch.get("workers") or []}
        mine = [e for e in starts if e["pid"] in pids]
        row["start_s"] = max(float(e["t"]) - t0 for e in mine) if mine else None
        row["uss"] = max(int(e["memory"]["uss"]) for e in mine if e.get("memory")) if mine else None
        row.update(start_cpu(run_dir, {e["pid"]: float(e["t"]) for e in mine}))
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:160]
        err = [e for e in evs if e.get("ev") == "script_error"]
        if err:
            row["error"] = f"{err[0].get('type')}: {str(err[0].get('message'))[:120]}"
    return row


def start_cpu(run_dir: Path, started: dict[int, float]) -> dict:
    """The slowest-starting worker's CPU seconds and share of its runnable time at the sampler's first reading after
    its start event (the workers of these loaders sit idle once started: 64 trivial samples)."""
    first: dict[int, dict] = {}
    path = run_dir / "samples.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if rec.get("k") != "s":
            continue
        for pid, t in started.items():
            vals = (rec.get("p") or {}).get(str(pid)) or {}
            if pid not in first and rec["t"] >= t and vals.get("cpu") is not None:
                first[pid] = vals
    if not first:
        return {}
    slowest = max(first, key=lambda p: started[p])
    vals = first[slowest]
    runq = vals.get("runq")
    share = vals["cpu"] / (vals["cpu"] + runq) if runq is not None and vals["cpu"] + runq > 0 else None
    return {"start_cpu_s": vals["cpu"], "worker_share": share}


def error_pct(predicted: float | None, measured: float | None) -> str:
    if predicted is None or measured is None or measured <= 0:
        return "-"
    return f"{(predicted - measured) / measured * 100:+.0f}%"


def table(rows: list[dict]) -> str:
    base = {r["method"]: r.get("uss") for r in rows if r["shape"] == "empty"}
    lines = [
        "| shape | method | predicted copy/worker | measured copy/worker | error | predicted start-up | measured "
        "start-up | error | predicted CPU | measured CPU | error | worker's share of a core: predicted / measured "
        "| notes |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        if r["shape"] == "empty":
            continue
        ready = r.get("ready") or {}
        blocked = [o for o in ready.get("objects") or [] if o.get("picklable") is False]
        if r["method"] == "fork":
            p_copy, p_start = 0, 0.0
        else:
            p_copy = ready.get("copy_bytes") if not blocked else None
            p_start = predicted_start_s(ready, r["method"]) if ready and not blocked else None
        uss, b = r.get("uss"), base.get(r["method"])
        m_copy = max(0, uss - b) if uss is not None and b is not None else None
        m_start = r.get("start_s")
        p_cpu = start_work_s(ready, r["method"]) if ready and not blocked else None
        m_cpu = r.get("start_cpu_s")
        serial = starts_in_turn(ready)  # the workers start one after another
        p_share = (
            worker_share(ready, 1 if serial else None) if ready and not blocked and r["method"] != "fork" else None
        )
        m_share = r.get("worker_share")
        shares = f"{_pct(p_share)} / {_pct(m_share)}"
        note = ""
        if blocked:
            note = f"predicted to fail: `{blocked[0].get('attribute')}` ({blocked[0].get('kind')})"
        if r["method"] != "fork" and blocked:
            note += "; it failed" if r["exit"] != 0 else "; it STARTED"
        elif r["exit"] != 0:
            note += f"run failed: {r.get('error')}"
        lines.append(
            f"| {r['shape']} | {r['method']} | {_mib(p_copy)} | {_mib(m_copy)} | "
            f"{error_pct(p_copy, m_copy) if r['method'] != 'fork' else '-'} | {_s(p_start)} | {_s(m_start)} | "
            f"{error_pct(p_start, m_start) if r['method'] != 'fork' else '-'} | {_s(p_cpu)} | {_s(m_cpu)} | "
            f"{error_pct(p_cpu, m_cpu) if r['method'] != 'fork' else '-'} | {shares} | {note} |"
        )
    return "\n".join(lines)


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.1f} MiB"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rows", type=Path, help="print the table of the rows a previous run saved (--out's .json)")
    args = parser.parse_args()
    rows = json.loads(args.rows.read_text()) if args.rows else []
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dlprobe-bench-ready-") as tmp:
        for shape in [] if args.rows else args.shapes.split(","):
            for method in METHODS:
                row = one(shape, method, args.mib, args.records, Path(tmp))
                rows.append(row)
                print(f"{shape:8} {method:10} exit {row['exit']} start {row.get('start_s')} uss {row.get('uss')}",
                      file=sys.stderr, flush=True)  # fmt: skip
                if args.out:
                    args.out.with_suffix(".json").write_text(json.dumps(rows))
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    text = (
        f"{machine()}; load average {load_at_start:.2f} at the start, {load} at the end\n\n"
        f"records: {args.records:,} dicts; arrays and mmap: {args.mib} MiB float32; 2 workers; 1 epoch\n\n"
        + table(rows)
    )
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
