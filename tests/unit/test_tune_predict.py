"""tune's predicted curve: fitted on the 1- and 2-worker trials with dlprobe run's model, checked on the others."""

from __future__ import annotations

from typing import Any

import pytest

from dlprobe.render.tune_table import prediction_line
from dlprobe.tune.predict import annotate


def _trials(rates: dict[int, float], busy: float | None) -> list[dict[str, Any]]:
    return [{"num_workers": n, "prefetch_factor": 2 if n else None, "stage": "workers", "status": "ok",
             "samples_per_s": r, "worker_cpu_share": busy if n else None} for n, r in rates.items()]  # fmt: skip


def test_waiting_workers_are_predicted_on_a_line_and_busy_ones_capped_by_the_cores():
    waiting = _trials({0: 100.0, 1: 500.0, 2: 1000.0, 4: 1900.0, 8: 4200.0}, busy=0.05)
    model = annotate(waiting, cores=2)
    assert model is not None and model["fitted_on"] == [1, 2] and model["cores_limit_workers"] == 40  # 2 / 5%
    by_n = {t["num_workers"]: t for t in waiting}
    assert by_n[8]["predicted_samples_per_s"] == 4000.0 and by_n[8]["prediction_error"] == round(4000 / 4200 - 1, 3)
    assert by_n[1]["prediction_fitted"] and not by_n[4]["prediction_fitted"]
    assert "predicted_samples_per_s" not in by_n[0]  # the main process alone is not on the workers' line
    assert model["median_error"] == pytest.approx((abs(2000 / 1900 - 1) + abs(4000 / 4200 - 1)) / 2, abs=0.001)
    busy = _trials({1: 400.0, 2: 800.0, 4: 790.0}, busy=1.0)  # two cores, each worker wants a whole one
    busy[0]["worker_cpu_share"] = 0.5  # queued half the time behind another job: still 2.5 ms of CPU a sample...
    busy[0]["samples_per_s"] = 200.0  # ...at half the rate
    model = annotate(busy, cores=2)
    assert model is not None and model["cpu_ms_per_sample"] == 2.5 and busy[2]["predicted_samples_per_s"] == 800.0
    assert model["median_error"] == pytest.approx(800 / 790 - 1, abs=0.001)
    line = prediction_line({"prediction": model})
    assert line is not None and "2.50 ms of CPU per sample, so 2 core(s) hold ~" in line
    assert "median error 1%" in line


def test_no_prediction_without_a_trial_with_one_or_two_workers():
    trials = _trials({0: 100.0, 4: 900.0}, busy=0.5)
    assert annotate(trials, cores=2) is None and "predicted_samples_per_s" not in trials[1]
    assert prediction_line({"prediction": None}) is None
