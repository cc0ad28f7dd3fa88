"""tune's sweep of worker counts past twice the cores: on while more workers still pay, and why it stopped."""

from __future__ import annotations

from typing import Any

from dlprobe.tune.plan import next_worker_count


def _trials(rates: dict[int, float], busy: float | None = None, fit: int | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"num_workers": n, "stage": "workers", "status": "ok", "samples_per_s": r}
                                  for n, r in rates.items()]  # fmt: skip
    rows[-1].update(worker_busy_share=busy, workers_that_fit_memory=fit)
    return rows


def test_throughput_still_rising_linearly_at_twice_the_cores_doubles_the_workers():
    # the sleeping loader on 2 cores: 119, 119, 245, 360, 522 samples/s for 0..4 workers
    more, why = next_worker_count(_trials({0: 119, 1: 119, 2: 245, 3: 360, 4: 522}), cap=32)
    assert more == 8 and "trying 8" in why


def test_flat_throughput_with_busy_workers_stops_and_says_why():
    more, why = next_worker_count(_trials({2: 480, 3: 490, 4: 500}, busy=0.95), cap=32)
    assert more is None and why.startswith("stopped at num_workers=4") and "asleep 5%" in why


def test_waiting_workers_go_on_with_a_modest_gain_but_busy_ones_do_not():
    rates = {4: 500, 8: 600}  # 20% of the linear gain
    assert next_worker_count(_trials(rates, busy=0.1), cap=32)[0] == 16
    assert next_worker_count(_trials(rates, busy=0.6), cap=32)[0] is None
    assert next_worker_count(_trials({4: 500, 8: 520}, busy=0.1), cap=32)[0] is None  # 8%: no gain to follow


def test_the_cap_and_the_memory_stop_the_doubling_and_say_so():
    more, why = next_worker_count(_trials({16: 1000, 32: 2000}, busy=0.05), cap=32)
    assert more is None and "cap of 32" in why
    assert next_worker_count(_trials({8: 1000, 16: 2000}, busy=0.05), cap=24)[0] == 24
    assert next_worker_count(_trials({2: 200, 4: 400}, busy=0.05, fit=6), cap=32)[0] == 6
    more, why = next_worker_count(_trials({2: 200, 4: 400}, busy=0.05, fit=4), cap=32)
    assert more is None and "only 4 workers fit the memory left" in why


def test_cpu_bound_workers_stop_at_twice_the_cores_even_when_the_last_step_rose():
    more, why = next_worker_count(_trials({3: 193, 4: 264}, busy=0.94), cap=32)  # a busy machine's noise
    assert more is None and "CPU-bound" in why
    assert next_worker_count(_trials({3: 193, 4: 264}, busy=0.69), cap=32)[0] == 8  # just under: the gain decides


def test_no_trend_without_two_worker_counts():
    more, why = next_worker_count(_trials({0: 100, 1: 150}), cap=32)
    assert more is None and "fewer than two" in why


def test_a_top_trial_without_cpu_readings_keeps_the_last_count_that_had_them():
    rows = _trials({4: 2200.0, 8: 4900.0, 16: 6500.0})  # 33% of linear from 8 to 16, CPU not read at 16
    rows[1]["worker_busy_share"] = 0.1  # asleep 90% at 8 workers
    assert next_worker_count(rows, cap=32)[0] == 32
    rows[1]["worker_busy_share"] = None
    assert next_worker_count(rows, cap=32)[0] is None
