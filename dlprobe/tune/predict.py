"""The throughput tune's search predicted for each trial before running it, and the error against what it measured."""

from __future__ import annotations

import statistics
from typing import Any

from dlprobe.tune.plan import completed
from dlprobe.tune.search import fit


def _ok(trial: dict[str, Any]) -> bool:
    return completed(trial) and trial.get("num_workers", 0) > 0


def annotate(trials: list[dict[str, Any]], cores: int) -> dict[str, Any] | None:
    """Adds prediction_error (predicted / measured - 1) to each completed trial with workers, and returns the final
    model with the median absolute error over the trials it predicted.

    A search trial keeps the rate the model predicted before it ran (re-fitted on the trials before it only); the
    1-worker trial is what the model is fitted on; a prefetch or pinning trial is predicted by the final model of
    the worker counts, which it did not take part in."""
    model = fit(trials, cores)
    if model is None:
        return None
    errors = []
    for t in trials:
        if not _ok(t):
            continue
        fitted = t.get("stage") == "workers" and t["num_workers"] == 1
        predicted = t.get("predicted_samples_per_s")
        if predicted is None or fitted:
            predicted = model.rate(t["num_workers"])
        t["predicted_samples_per_s"] = round(predicted, 1)
        t["prediction_error"] = round(predicted / t["samples_per_s"] - 1, 3)
        t["prediction_fitted"] = fitted
        if not fitted:
            errors.append(abs(t["prediction_error"]))
    return {
        "fitted_on": [1],
        **model.summary(),
        "checked_trials": len(errors),
        "median_error": round(statistics.median(errors), 3) if errors else None,
    }
