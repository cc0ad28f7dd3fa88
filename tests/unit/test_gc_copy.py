"""gc-copy and the collection steps on synthetic runs: named where the copy's pages are private and dirty, not where
a memory-mapped file's pages rose while a collection happened to run."""

from __future__ import annotations

from dlprobe.analysis.gc_copy_findings import find_gc_copy
from dlprobe.analysis.worker_steps import worker_steps
from dlprobe.loader_model.worker_memory import FULL_COLLECTION
from tests.unit.fakes import MiB, loader, run, series, worker

USS = [10, 13, 13.2, 47.5, 47.6, 47.8]  # MiB at 100..105 s: the copy between 102 and 103 s


def _worker(pid: int, worker_id: int, dirty: list[float]):
    s = series([int(v * MiB) for v in USS], [int(v * MiB) + 100 * MiB for v in USS])
    s.private_dirty = [int(v * MiB) for v in dirty]
    proc = worker(pid, worker_id, s)
    proc.full_collections = [(102.4, 102.55)]
    return proc


def _run(dirty: list[float]):
    return run([loader()], [_worker(11, 0, dirty), _worker(12, 1, dirty)])


def test_a_dirty_rise_a_collection_ran_in_is_the_copy():
    copied = _run([2, 5, 5.2, 39.5, 39.6, 39.8])
    for proc in copied.processes:
        found = worker_steps(copied, proc)
        assert found is not None and [s.cause for s in found.steps] == [FULL_COLLECTION]
    [finding] = find_gc_copy(copied)
    assert finding.evidence["total_bytes"] >= 2 * 30 * MiB and {
        r["worker_id"] for r in finding.evidence["workers"]
    } == {0, 1}


def test_a_file_s_clean_pages_rising_with_a_collection_are_no_copy():
    # Private_Dirty flat: the rise is a memory-mapped file's pages this worker alone read (they count in USS)
    mapped = _run([2, 5, 5.2, 5.3, 5.3, 5.4])
    for proc in mapped.processes:
        found = worker_steps(mapped, proc)
        assert found is not None and all(s.cause != FULL_COLLECTION for s in found.steps), found.steps
    assert find_gc_copy(mapped) == []
