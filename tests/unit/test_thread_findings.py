"""Loaders whose workers are threads (worker_method="thread"): per-thread rows, and what is not looked for."""

from __future__ import annotations

from dlprobe.analysis.findings.shm import find_shm_pressure
from dlprobe.analysis.findings.threads import NOT_APPLICABLE, find_thread_workers
from dlprobe.analysis.run.model import Epoch, SystemSeries, ThreadRecord
from tests.unit.fakes import MiB, cpu_series, loader, parent, run


def _thread_loader(tids: dict[int, int], batches: list[int] | None = (30, 30), start_method: str | None = "thread"):
    epoch = Epoch(0, 100.0, 0.01, t_end=110.0, worker_batches=None if batches is None else list(batches))
    epoch.worker_tids = dict(tids)
    return loader(num_workers=2, start_method=start_method, epochs=[epoch], batch_bytes=20 * MiB)


def _thread(tid: int, worker_id: int, share: float) -> ThreadRecord:
    return ThreadRecord(tid, 1, 0, worker_id, "pt_thread_data_", cpu_series(100.0, 110.0, share, runq_share=0.1))


def test_each_thread_gets_its_batches_and_cpu():
    threads = [_thread(501, 0, 0.5), _thread(502, 1, 0.25)]
    r = run([_thread_loader({501: 0, 502: 1})], [parent(100 * MiB)])
    r.threads = threads
    (finding,) = find_thread_workers(r)
    assert finding.code == "thread-workers" and finding.severity == "info" and finding.loader_id == 0
    rows = finding.evidence["worker_threads"]
    assert [(row["worker_id"], row["tids"], row["batches"]) for row in rows] == [(0, [501], 30), (1, [502], 30)]
    assert [row["cpu_s"] for row in rows] == [5.0, 2.5]
    assert [row["cpu_share"] for row in rows] == [0.5, 0.25]
    assert [row["runq_share"] for row in rows] == [0.1, 0.1]
    assert finding.evidence["threads_cpu_share"] == 0.75
    assert "worker 0 (thread 501): 30 batches, at least 5.00 s of CPU (50% of a core" in finding.detail
    assert finding.evidence["not_applicable"] == list(NOT_APPLICABLE)
    for code in NOT_APPLICABLE:
        assert code in finding.detail


def test_cpu_not_read_is_said_and_no_number_is_made_up():
    r = run([_thread_loader({501: 0, 502: 1}, batches=None)], [parent(100 * MiB)])
    (finding,) = find_thread_workers(r)
    rows = finding.evidence["worker_threads"]
    assert all(row["cpu_s"] is None and row["cpu_share"] is None and row["batches"] is None for row in rows)
    assert finding.evidence["threads_cpu_share"] is None
    assert "CPU time not read" in finding.detail and "batches not counted" in finding.detail
    assert "worker(s) 0, 1 was not read" in finding.detail


def test_process_workers_get_no_thread_finding():
    r = run([loader(num_workers=2, start_method="fork", epochs=[Epoch(0, 100.0, 0.01)])], [parent(100 * MiB)])
    assert find_thread_workers(r) == []


def test_shm_pressure_leaves_thread_workers_out():
    # 2 workers x prefetch 2 x 20 MiB batches would be 80 MiB of /dev/shm for worker processes: most of 100 MiB
    system = SystemSeries(t=[100.0, 101.0], shm_used=[1 * MiB, 2 * MiB], shm_total=100 * MiB)
    processes = run([_thread_loader({}, start_method="fork")], [parent(100 * MiB)], system=system)
    assert [f.code for f in find_shm_pressure(processes)] == ["shm-pressure"]
    threads = run([_thread_loader({501: 0, 502: 1})], [parent(100 * MiB)], system=system)
    assert find_shm_pressure(threads) == []
