"""The throughput curve tune predicts from its first worker trials (dlprobe run's model), and its error per trial."""

from __future__ import annotations

import statistics
from typing import Any

from dlprobe.analysis.throughput_findings import predicted_rate

FIT_COUNTS = (1, 2)  # the worker counts the model is fitted on: the first trials with workers


def _ok(trial: dict[str, Any]) -> bool:
    return trial.get("status") == "ok" and bool(trial.get("samples_per_s")) and trial.get("num_workers", 0) > 0


def fit(trials: list[dict[str, Any]], cores: int) -> dict[str, Any] | None:
    """One worker's time per sample and its busy share from the 1- and 2-worker trials; None without them."""
    first = [t for t in trials if _ok(t) and t["num_workers"] in FIT_COUNTS and t.get("stage") == "workers"]
    if not first:
        return None
    per_sample = statistics.mean(t["num_workers"] / t["samples_per_s"] for t in first)
    # CPU seconds per sample set the cores' cap: neither the busy share (time queued for a core at 1-2 workers is
    # the machine's other load, and read as demand it caps I/O-bound workers far too early) nor the CPU share alone
    # (a CPU-bound worker queued half the time reads as half as hungry) holds across machines' load.
    cpu = [t["worker_cpu_share"] * t["num_workers"] / t["samples_per_s"] for t in first
           if isinstance(t.get("worker_cpu_share"), (int, float))]  # fmt: skip
    cpu_per_sample = statistics.mean(cpu) if cpu else 0.0  # not read: the cores bound nothing in the prediction
    return {
        "fitted_on": sorted(t["num_workers"] for t in first),
        "worker_samples_per_s": round(1 / per_sample, 2),
        "cpu_ms_per_sample": round(1000 * cpu_per_sample, 4) if cpu else None,
        "usable_cores": cores,
        # where the cores stop the line: past it more workers only queue for a CPU
        "cores_limit_workers": round(cores * per_sample / cpu_per_sample, 1) if cpu_per_sample > 0 else None,
    }


def predict(model: dict[str, Any], num_workers: int) -> float:
    per_sample = 1 / model["worker_samples_per_s"]
    busy = (model.get("cpu_ms_per_sample") or 0.0) / 1000 / per_sample  # a worker's share of a core it needs
    return predicted_rate(num_workers, per_sample, busy, model["usable_cores"])


def annotate(trials: list[dict[str, Any]], cores: int) -> dict[str, Any] | None:
    """Adds predicted_samples_per_s and prediction_error (predicted / measured - 1) to each completed trial with
    workers, and returns the model with the median absolute error over the trials it was not fitted on."""
    model = fit(trials, cores)
    if model is None:
        return None
    errors = []
    for t in trials:
        if not _ok(t):
            continue
        predicted = predict(model, t["num_workers"])
        t["predicted_samples_per_s"] = round(predicted, 1)
        t["prediction_error"] = round(predicted / t["samples_per_s"] - 1, 3)
        fitted = t.get("stage") == "workers" and t["num_workers"] in model["fitted_on"]
        t["prediction_fitted"] = fitted
        if not fitted:
            errors.append(abs(t["prediction_error"]))
    model["checked_trials"] = len(errors)
    model["median_error"] = round(statistics.median(errors), 3) if errors else None
    return model
