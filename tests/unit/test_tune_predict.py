"""tune's predictions: each search trial keeps the rate predicted before it ran, and the error against the measured."""

from __future__ import annotations

from typing import Any

import pytest

from dlprobe.render.tune_table import prediction_line
from dlprobe.tune.predict import annotate


def _trial(n: int, rate: float, predicted: float | None = None, stage: str = "workers", **more: Any) -> dict[str, Any]:
    return {"num_workers": n, "prefetch_factor": 2 if n else None, "stage": stage, "status": "ok",
            "samples_per_s": rate, "predicted_samples_per_s": predicted, **more}  # fmt: skip


def test_the_error_is_of_the_prediction_made_before_each_trial_and_the_one_worker_trial_is_the_fit():
    one = _trial(1, 500.0, worker_cpu_share=0.05, worker_runq_share=0.0, main_cpu_share=0.01)
    # 32 measured twice (repeats): its rate under the model is a bound, not a busy moment
    trials = [_trial(0, 400.0), one, _trial(16, 7200.0, predicted=8000.0),
              _trial(32, 12000.0, predicted=15000.0, repeats=1), _trial(32, 12500.0, stage="prefetch")]  # fmt: skip
    model = annotate(trials, cores=2)
    assert model is not None and model["fitted_on"] == [1] and model["worker_samples_per_s"] == 500.0
    assert model["cpu_ms_per_sample"] == 0.1 and model["main_cpu_ms_per_sample"] == 0.02
    assert one["prediction_fitted"] and one["prediction_error"] == 0.0
    assert trials[2]["prediction_error"] == round(8000 / 7200 - 1, 3) and not trials[2]["prediction_fitted"]
    # the prefetch trial was not predicted by the search: the final model (flat at the 12,000 measured) predicts it
    assert trials[4]["predicted_samples_per_s"] == 12000.0
    assert "predicted_samples_per_s" not in trials[0] or trials[0]["predicted_samples_per_s"] is None
    errors = sorted([8000 / 7200 - 1, 15000 / 12000 - 1, 1 - 12000 / 12500])
    assert model["median_error"] == pytest.approx(errors[1], abs=0.001) and model["checked_trials"] == 3
    line = prediction_line({"prediction": model})
    assert line is not None and "0.10 ms of a worker's CPU and 0.02 ms of the main process's per sample" in line
    assert "flat at 12,000 samples/s" in line and "median error 11% over 3 trial(s)" in line


def test_no_prediction_without_a_completed_one_worker_trial():
    trials = [_trial(0, 100.0), _trial(4, 900.0)]
    assert annotate(trials, cores=2) is None and trials[1]["predicted_samples_per_s"] is None
    assert prediction_line({"prediction": None}) is None
