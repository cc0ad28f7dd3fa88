"""What `--log-to` costs the script at each of its log calls: the real library's log call with dlprobe's sink on
against the same call with it off, in one process, alternated in rounds so the machine's other load hits both alike.

W&B offline (`wandb.init(mode="offline")`, WANDB_DIR in a temporary directory) and MLflow on a local file store; the
sink reads a live.json of the size a 2-loader, 8-worker run writes (about 120 keys), replaced every round, so the
re-read and parse of a new file are in the figure too. Also dlprobe's own part alone: the wrapper around a log call
that does nothing, in microseconds per call. Prints and writes benchmarks/out/sink_cost.json; ratios are on / off.
Usage: python benchmarks/sink_cost.py [--calls 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, median

OUT = Path(__file__).resolve().parent / "out"
WORKERS, LOADERS = 8, 2
PER_WORKER = ("uss_bytes", "pss_bytes", "pss_anon_bytes", "pss_file_bytes", "rss_bytes", "open_fds",
              "cpu_seconds_total")  # fmt: skip


def live_json(run_dir: Path, version: int) -> None:
    values: dict[str, float] = {}
    for loader in range(LOADERS):
        for worker in range(WORKERS // LOADERS):
            for name in PER_WORKER:
                values[f"dlprobe/loader{loader}/worker{worker}/{name}"] = float(version * 1000 + worker)
        values[f"dlprobe/loader{loader}/batches_total"] = float(version)
        values[f"dlprobe/loader{loader}/data_wait_seconds_total"] = version * 0.1
    record = {"t": time.time(), "processes": {str(os.getpid()): {"rank": None, "values": values}},
              "node": {"dlprobe/node/shm_used_bytes": 4096.0}}  # fmt: skip
    tmp = run_dir / "live.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(run_dir / "live.json")


def per_call_s(log: Any, calls: int, start: int) -> float:
    began = time.perf_counter()
    for step in range(start, start + calls):
        log(step)
    return (time.perf_counter() - began) / calls


def measure(name: str, log_off: Any, log_on: Any, calls: int, rounds: int, run_dir: Path) -> dict[str, Any]:
    off, on, ratios = [], [], []
    step = 0
    for round_no in range(rounds):
        live_json(run_dir, round_no + 1)
        pair = [(False, log_off), (True, log_on)] if round_no % 2 == 0 else [(True, log_on), (False, log_off)]
        times = {}
        for sink_on, log in pair:
            times[sink_on] = per_call_s(log, calls, step)
            step += calls
        off.append(times[False])
        on.append(times[True])
        ratios.append(times[True] / times[False])
    out = {"off_ms_per_call": round(median(off) * 1e3, 4), "on_ms_per_call": round(median(on) * 1e3, 4),
           "ratio_on_off": round(median(ratios), 3), "rounds": rounds, "calls_per_round": calls}  # fmt: skip
    print(f"{name:>8}: {out['off_ms_per_call']:.3f} ms/call off, {out['on_ms_per_call']:.3f} ms on, "
          f"ratio {out['ratio_on_off']:.3f}")  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dlprobe-sink-"))
    os.environ.update({"DLPROBE_RUN_DIR": str(tmp), "DLPROBE_LOG_TO": "wandb,mlflow", "WANDB_MODE": "offline",
                       "WANDB_DIR": str(tmp), "WANDB_SILENT": "true", "MLFLOW_ALLOW_FILE_STORE": "true",
                       "MLFLOW_TRACKING_URI": (tmp / "mlruns").as_uri()})  # fmt: skip
    from dlprobe.in_training import sinks

    results: dict[str, Any] = {"machine": machine(), "keys": WORKERS * len(PER_WORKER) + 2 * LOADERS + 1}

    # dlprobe's part alone: the wrapper around a call that does nothing (wandb's path, reading live.json)
    class Run:
        id = "bench"

        def log(self, data: dict[str, float], step: int | None = None) -> None:
            return None

    bare = Run()
    plain_log = Run.log
    sinks._tallies["wandb"].patched = True
    module = type(sys)("wandb.sdk.wandb_run")
    module.Run = Run  # type: ignore[attr-defined]
    sys.modules["wandb.sdk.wandb_run"] = module
    sinks._patch_wandb()
    wrapped = Run.log
    results["wrapper_alone"] = measure(
        "wrapper", lambda s: plain_log(bare, {"loss": 1.0}, step=s), lambda s: wrapped(bare, {"loss": 1.0}, step=s),
        args.calls * 20, args.rounds, tmp)  # fmt: skip
    del sys.modules["wandb.sdk.wandb_run"]
    results["wrapper_alone"]["us_added_per_call"] = round(
        (results["wrapper_alone"]["on_ms_per_call"] - results["wrapper_alone"]["off_ms_per_call"]) * 1e3, 2
    )

    try:
        import wandb
        from wandb.sdk import wandb_run

        original = wandb_run.Run.log
        sinks._patch_wandb()
        patched = wandb_run.Run.log
        run = wandb.init(project="dlprobe-bench", mode="offline")
        results["wandb"] = measure(
            "wandb", lambda s: original(run, {"loss": 1.0 / (s + 1)}, step=s),
            lambda s: patched(run, {"loss": 1.0 / (s + 1)}, step=s), args.calls, args.rounds, tmp)  # fmt: skip
        run.finish()
    except ImportError as exc:
        results["wandb"] = {"skipped": str(exc)}

    try:
        import mlflow
        from mlflow.tracking import fluent

        original_metric = fluent.log_metric
        sinks._patch_mlflow()
        patched_metric = fluent.log_metric
        mlflow.set_experiment("dlprobe-bench")
        with mlflow.start_run():
            results["mlflow"] = measure(
                "mlflow", lambda s: original_metric("loss", 1.0 / (s + 1), step=s),
                lambda s: patched_metric("loss", 1.0 / (s + 1), step=s), args.calls // 4, args.rounds, tmp)  # fmt: skip
    except ImportError as exc:
        results["mlflow"] = {"skipped": str(exc)}

    OUT.mkdir(exist_ok=True)
    (OUT / "sink_cost.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
