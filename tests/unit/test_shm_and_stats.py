"""shm-pressure and the loader wait summary on synthetic runs."""

from __future__ import annotations

from dlprobe.analysis.model import Epoch, SystemSeries
from dlprobe.analysis.shm_findings import find_shm_pressure, in_flight_bytes
from dlprobe.analysis.stats import wait_summary
from tests.unit.fakes import MiB, loader, run


def _shm(used: list[int], total: int) -> SystemSeries:
    return SystemSeries(t=list(range(len(used))), shm_used=used, shm_total=total)


def test_in_flight_estimate_is_workers_times_prefetch_times_batch():
    assert in_flight_bytes(4, 2, 10 * MiB) == 80 * MiB
    assert in_flight_bytes(4, None, 10 * MiB) == 80 * MiB  # PyTorch's default prefetch_factor is 2
    assert in_flight_bytes(0, 2, 10 * MiB) == 0


def test_nearly_full_shm_is_reported():
    data = run([loader(batch_bytes=1 * MiB)], [], _shm([1 * MiB, 60 * MiB, 10 * MiB], 64 * MiB))
    [finding] = find_shm_pressure(data)
    assert finding.evidence["shm_peak_bytes"] == 60 * MiB
    assert finding.evidence["in_flight_estimate_bytes"] == 4 * MiB


def test_in_flight_estimate_alone_can_trigger():
    data = run([loader(batch_bytes=10 * MiB)], [], _shm([1 * MiB, 2 * MiB], 64 * MiB))
    [finding] = find_shm_pressure(data)
    assert finding.evidence["in_flight_estimate_bytes"] == 40 * MiB


def test_roomy_shm_is_quiet():
    data = run([loader(batch_bytes=1 * MiB)], [], _shm([1 * MiB, 5 * MiB], 1024 * MiB))
    assert find_shm_pressure(data) == []


def test_wait_summary_counts_iterator_start_as_waiting():
    epoch = Epoch(0, t_start=100.0, iter_s=0.5, t_end=110.0, batches=3, waits=[1.5, 0.5, 0.5])
    summary = wait_summary(loader(epochs=[epoch]))
    assert summary["batches"] == 3
    assert summary["wait_s"] == 3.0
    assert summary["wait_fraction"] == 0.3
    assert summary["first_batch_s"] == 2.0
    assert summary["median_wait_s"] == 0.5
