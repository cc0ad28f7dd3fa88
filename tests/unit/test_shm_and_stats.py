"""shm-pressure and the loader wait summary on synthetic runs."""

from __future__ import annotations

from dlprobe.analysis.findings.shm import find_shm_pressure
from dlprobe.analysis.measures.batch_sent import SentBytes, in_flight_bytes, sent_bytes
from dlprobe.analysis.measures.stats import wait_summary
from dlprobe.analysis.run.model import Epoch, SystemSeries
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


def test_batches_of_views_count_what_they_send_and_name_the_views():
    """The report's numbers: batches of 3.4 MiB whose storages hold 19x that fill a 64 MiB /dev/shm."""
    lo = loader(batch_bytes=int(3.4 * MiB))
    lo.batch_info = {"bytes": int(3.4 * MiB), "storage_bytes": int(19 * 3.4 * MiB), "leaves": []}
    [finding] = find_shm_pressure(run([lo], [], _shm([1 * MiB, 63 * MiB], 64 * MiB)))
    assert finding.evidence["views"] and finding.evidence["loaders"][0]["storage_ratio"] == 19.0
    assert finding.evidence["in_flight_estimate_bytes"] == 4 * int(19 * 3.4 * MiB)  # what is sent, not 13.6 MiB
    assert "batches hold 3.4 MiB each but send 64.6 MiB (storages 19x larger: views of larger tensors" in finding.title
    assert finding.fix.startswith("Return copies, not views") and ".clone()" in finding.fix
    assert "Ruled out as the whole cause: the batches' own size (13.6 MiB in flight" in finding.detail


def test_storages_barely_larger_than_the_tensors_are_no_views():
    assert sent_bytes({"bytes": 1000, "storage_bytes": 1500}) == SentBytes(1000, 1500)
    assert not SentBytes(1000, 1500).views and SentBytes(1000, 2000).views
    assert sent_bytes({"bytes": 1000}) is None  # a run recorded before the storages were read
    lo = loader(batch_bytes=1 * MiB)
    lo.batch_info = {"bytes": 1 * MiB, "storage_bytes": 1 * MiB, "leaves": []}
    [finding] = find_shm_pressure(run([lo], [], _shm([1 * MiB, 60 * MiB], 64 * MiB)))
    assert not finding.evidence["views"] and "views" not in finding.title and finding.fix.startswith("Give the job")


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
