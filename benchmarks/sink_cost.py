"""`--log-to`'s cost per batch in the training loop: the same hooked loop with the script's own W&B (offline) or
MLflow (file store) run active, with the sink off (no DLPROBE_LOG_TO) and on, alternated off-on, on-off.

The loop is hook_cost.py's (num_workers=0, trivial dataset, batch_size=1, identity collate), so the hook is as large
a share of a batch as it can ever be. A thread of the script stands in for the supervisor, rewriting the live
summary (2 workers of 1 loader) every 0.5 s in both runs, so on and off differ only by the sink. Each run's best of 3
passes is kept; the medians of the per-round ratios (on / off) are printed. Then, in the "on" process, one log of the
summary into the library (what happens at most once a second) is timed alone.

Usage: python benchmarks/sink_cost.py [--rounds N] [--batches N] [--library wandb|mlflow|both]
Writes benchmarks/out/sink_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric, run

OUT = Path(__file__).resolve().parent / "out"

SCRIPT = """
import json, os, statistics, sys, threading, time
from dlprobe.in_training import hooks, sinks
from dlprobe import atomic

hooks.install()
from torch.utils.data import DataLoader

library, batches = sys.argv[1], int(sys.argv[2])
summary_path = os.path.join(os.environ["DLPROBE_RUN_DIR"], "live_summary.json")


def summary(n):
    workers = [{"worker": w, "pid": 10 + w, "uss": (40 << 20) + n, "pss": 90 << 20, "pss_anon": 35 << 20,
                "pss_file": 6 << 20, "pss_shmem": 1 << 12, "rss": 200 << 20, "fds": 20} for w in range(2)]
    return {"t": time.time(), "shm_used": 1 << 20, "shm_total": 1 << 30, "processes": [
        {"pid": os.getpid(), "rank": None, "uss": 300 << 20, "pss": 310 << 20, "rss": 400 << 20, "loaders": [
            {"loader": 0, "batches": n, "data_wait_s": 0.1, "data_wait_share": 0.2, "workers": workers}]}]}


def supervisor():
    n = 0
    while True:
        atomic.write_bytes_atomic(summary_path, json.dumps(summary(n)).encode())
        n += 1
        time.sleep(0.5)


threading.Thread(target=supervisor, daemon=True).start()
if library == "wandb":
    import wandb
    wandb.init(project="dlprobe-bench", mode="offline")
else:
    import mlflow
    mlflow.start_run()
time.sleep(0.6)
loader = DataLoader(list(range(batches)), batch_size=1, num_workers=0, collate_fn=lambda x: x)
best = float("inf")
for _ in range(3):
    start = time.perf_counter()
    for _batch in loader:
        pass
    best = min(best, time.perf_counter() - start)
print("us_per_batch", best / batches * 1e6)
# The hook alone, as hooks.py runs it after every batch (between two logs: the sink is not due)
import timeit
due_at, sinks._state.next_at = sinks._state.next_at, float("inf")
empty = min(timeit.repeat("pass", number=1_000_000, repeat=5))
hook = min(timeit.repeat("if sinks.ON: sinks.on_batch()", globals={"sinks": sinks}, number=1_000_000, repeat=5))
print("ns_hook", (hook - empty) * 1e3)
sinks._state.next_at = due_at
if sinks.ON:
    logs = []
    for n in range(20):
        atomic.write_bytes_atomic(summary_path, json.dumps(summary(10_000 + n)).encode())
        start = time.perf_counter()
        sinks._log_new()
        logs.append(time.perf_counter() - start)
    print("us_per_log", statistics.median(logs) * 1e6)
    print("logged", sum(s.logged for s in sinks._state.sinks))
if library == "wandb":
    wandb.finish()
else:
    mlflow.end_run()
"""


def one(script: Path, tmp: Path, library: str, batches: int, on: bool, i: int) -> dict[str, float]:
    run_dir = tmp / f"{library}-{'on' if on else 'off'}-{i}"
    run_dir.mkdir()
    env = {"DLPROBE_RUN_DIR": str(run_dir), "WANDB_DIR": str(tmp), "WANDB_SILENT": "true",
           "MLFLOW_TRACKING_URI": f"file:{tmp / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true"}  # fmt: skip
    if on:
        env["DLPROBE_LOG_TO"] = library
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        proc, _ = run([PYTHON, str(script), library, str(batches)])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    out = {"us_per_batch": parse_metric(proc.stdout, "us_per_batch"), "ns_hook": parse_metric(proc.stdout, "ns_hook")}
    if on:
        out["us_per_log"] = parse_metric(proc.stdout, "us_per_log")
        out["logged"] = parse_metric(proc.stdout, "logged")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=50_000)
    parser.add_argument("--library", choices=("wandb", "mlflow", "both"), default="both")
    args = parser.parse_args()
    print(f"machine: {machine()}, load {os.getloadavg()[0]:.1f}")
    libraries = ("wandb", "mlflow") if args.library == "both" else (args.library,)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "loop.py"
        script.write_text(SCRIPT)
        for library in libraries:
            off: list[float] = []
            off_hook: list[float] = []
            on: list[dict[str, float]] = []
            for i in range(args.rounds):
                order = (False, True) if i % 2 == 0 else (True, False)
                for sink_on in order:
                    got = one(script, tmp, library, args.batches, sink_on, i)
                    if sink_on:
                        on.append(got)
                    else:
                        off.append(got["us_per_batch"])
                        off_hook.append(got["ns_hook"])
            ratios = [o["us_per_batch"] / f for o, f in zip(on, off, strict=True)]
            results[library] = {
                "off_us_per_batch": round(median(off), 3),
                "on_us_per_batch": round(median([o["us_per_batch"] for o in on]), 3),
                "added_us_per_batch": round(median([o["us_per_batch"] - f for o, f in zip(on, off, strict=True)]), 3),
                "ratio_on_off": round(median(ratios), 4),
                "ratio_range": [round(min(ratios), 4), round(max(ratios), 4)],
                "us_per_log": round(median([o["us_per_log"] for o in on]), 1),
                # the hook alone per batch, between logs: off (one attribute read) and on (the rate limit's check)
                "hook_off_ns": round(median(off_hook), 1),
                "hook_on_ns": round(median([o["ns_hook"] for o in on]), 1),
            }
            r = results[library]
            print(f"{library:6s} off {r['off_us_per_batch']:6.2f} us/batch  on {r['on_us_per_batch']:6.2f} us/batch  "
                  f"added {r['added_us_per_batch']:+.2f} us  ratio on/off {r['ratio_on_off']:.3f} "
                  f"({r['ratio_range'][0]:.3f}-{r['ratio_range'][1]:.3f})  one log {r['us_per_log']:.0f} us "
                  f"(at most 1/s: {r['us_per_log'] / 1e4:.3f}% of the loop's time); the hook alone "
                  f"off {r['hook_off_ns']:.0f} ns, on {r['hook_on_ns']:.0f} ns")  # fmt: skip
    OUT.mkdir(exist_ok=True)
    (OUT / "sink_cost.json").write_text(json.dumps({"machine": machine(), "rounds": args.rounds, **results}, indent=1))


if __name__ == "__main__":
    main()
