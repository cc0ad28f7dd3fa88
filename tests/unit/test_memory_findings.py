"""cow-growth and spawn-copy on synthetic runs."""

from __future__ import annotations

from dlprobe.analysis.memory_findings import find_cow_growth, find_spawn_copy
from tests.unit.fakes import MiB, loader, run, series, worker

SUSPECT = {"attribute": "self.rows", "type": "list[str]", "items": 1_000_000, "objects": 1_000_001,
           "est_bytes": 80 * MiB}  # fmt: skip


def _growing(pid: int, wid: int, gain: int, rss_gain: int = 0):
    return worker(pid, wid, series([5 * MiB, 5 * MiB + gain // 2, 5 * MiB + gain], [300 * MiB, 300 * MiB,
                                                                                    300 * MiB + rss_gain]))  # fmt: skip


def test_copy_on_access_growth_is_reported_with_the_suspect():
    data = run([loader(suspects=[SUSPECT])], [_growing(11, 0, 200 * MiB), _growing(12, 1, 190 * MiB)])
    [finding] = find_cow_growth(data)
    assert finding.code == "cow-growth" and finding.severity == "warning"
    assert [w["uss_growth_bytes"] for w in finding.evidence["workers"]] == [200 * MiB, 190 * MiB]
    assert finding.evidence["suspects"][0]["attribute"] == "self.rows"
    assert "RSS stayed flat" in finding.title
    assert "`self.rows` is a list[str] with 1,000,000 items" in finding.fix


def test_growth_below_threshold_is_not_reported():
    data = run([loader(suspects=[SUSPECT])], [_growing(11, 0, 30 * MiB), _growing(12, 1, 20 * MiB)])
    assert find_cow_growth(data) == []


def test_growth_with_rss_is_called_allocation_not_copy():
    data = run([loader()], [_growing(11, 0, 200 * MiB, rss_gain=190 * MiB)])
    [finding] = find_cow_growth(data)
    assert "keep allocating" in finding.title


def test_spawn_workers_are_not_blamed_for_copy_on_access():
    data = run([loader(start_method="spawn")], [_growing(11, 0, 200 * MiB)])
    assert find_cow_growth(data) == []


def test_growth_near_the_memory_limit_is_an_error():
    data = run([loader()], [_growing(11, 0, 600 * MiB), _growing(12, 1, 600 * MiB)], mem_total=2048 * MiB)
    [finding] = find_cow_growth(data)
    assert finding.severity == "error"


def test_spawn_copy_of_a_large_dataset():
    data = run([loader(start_method="spawn", num_workers=4, est_bytes=100 * MiB)], [])
    [finding] = find_spawn_copy(data)
    assert finding.evidence["total_copied_bytes"] == 400 * MiB
    assert "4 spawn workers" in finding.title


def test_spawn_copy_ignores_small_datasets_and_fork():
    assert find_spawn_copy(run([loader(start_method="spawn", est_bytes=10 * MiB)], [])) == []
    assert find_spawn_copy(run([loader(start_method="fork", est_bytes=500 * MiB)], [])) == []
