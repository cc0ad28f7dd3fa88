"""cow-growth and spawn-copy on synthetic runs."""

from __future__ import annotations

import pytest

from dlprobe.analysis.findings.memory import (
    COW_ALLOCATING,
    COW_LOADED_AT_START,
    find_cow_growth,
)
from dlprobe.analysis.findings.spawn_copy import find_spawn_copy
from dlprobe.analysis.measures.worker_growth import loaded_at_start
from dlprobe.analysis.run.model import Series
from tests.unit import fakes
from tests.unit.fakes import MiB, loader, parent, series, worker

PARENT_USS = 300 * MiB  # the training process: a quarter of it is what the workers' copies must reach


def run(loaders, processes, **kw):
    """A synthetic run with its training process (the parent the workers forked from)."""
    return fakes.run(loaders, [parent(PARENT_USS), *processes], **kw)


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


def _kinds(pid: int, wid: int, anon: list[int], dirty: list[int], file: int = 0, shmem: list[int] | None = None):
    """A worker whose samples carry memory by kind of page (runs recorded by this version)."""
    s = series([d + file for d in dirty], [300 * MiB + a for a in anon])
    n = len(anon)
    s.anon, s.private_dirty, s.private_clean = list(anon), list(dirty), [file] * n
    s.pss_anon, s.pss_file = list(dirty), [file * i for i in range(n)]
    s.pss_shmem = list(shmem) if shmem is not None else [0] * n
    return worker(pid, wid, s)


def test_copy_on_write_is_private_dirty_rising_with_anonymous_flat():
    cow = [5 * MiB, 100 * MiB, 200 * MiB]
    data = run([loader(suspects=[SUSPECT])], [_kinds(11, 0, [150 * MiB] * 3, cow)])
    [finding] = find_cow_growth(data)
    assert "copy-on-write" in finding.title and "Anonymous stayed flat" in finding.title
    assert finding.evidence["variant"] == "copied"
    [row] = finding.evidence["workers"]
    assert row["cow_bytes"] == 195 * MiB and row["anon_growth_bytes"] == 0


def test_a_worker_unmapping_shared_pages_is_not_copy_on_write():
    # Seen with dlprobe.fixes.PackedRecords: the worker frees the parent's emptied arenas (Anonymous -60 MiB, never
    # touched, so Private_Dirty unchanged) while its own allocations copy 38 MiB: 38 MiB of copies, not 98.
    anon = [252 * MiB, 192 * MiB, 192 * MiB]
    dirty = [11 * MiB, 30 * MiB, 49 * MiB]
    data = run([loader(suspects=[SUSPECT])], [_kinds(11, 0, anon, dirty)])
    assert find_cow_growth(data) == []
    data = run([loader(suspects=[SUSPECT])], [_kinds(11, 0, anon, [d * 3 for d in dirty])])
    [finding] = find_cow_growth(data)
    assert finding.evidence["workers"][0]["cow_bytes"] == 3 * 49 * MiB - 3 * 11 * MiB


def test_new_allocations_are_anonymous_rising():
    grow = [5 * MiB, 100 * MiB, 200 * MiB]
    data = run([loader()], [_kinds(11, 0, [150 * MiB + g for g in grow], grow)])
    [finding] = find_cow_growth(data)
    assert "keep allocating" in finding.title and "not copy-on-write" in finding.title
    assert finding.evidence["variant"] == "allocating"
    assert finding.evidence["workers"][0]["cow_bytes"] == 0
    assert "gc.freeze" not in finding.fix


def test_a_freshly_written_file_mapped_by_one_worker_is_not_copy_on_write():
    # np.save, then each worker maps the file: until writeback its page cache is dirty, so the one worker mapping it
    # counts it as Private_Dirty, with Pss_File rising by the same (seen under load: 64 MiB, 1 run in 6)
    w = _kinds(11, 0, [150 * MiB] * 3, [5 * MiB, 100 * MiB, 200 * MiB])
    w.series.pss_file = [2 * MiB, 97 * MiB, 197 * MiB]
    assert [f.code for f in find_cow_growth(run([loader(suspects=[SUSPECT])], [w]))] == ["mapped-pages"]
    w.series.pss_file = [2 * MiB] * 3  # the same rise with no file pages: the parent's pages copied
    [finding] = find_cow_growth(run([loader(suspects=[SUSPECT])], [w]))
    assert finding.evidence["workers"][0]["cow_bytes"] == 195 * MiB


def test_file_and_shm_pages_alone_never_raise_cow_growth():
    # USS grows by 300 MiB of mapped file pages and /dev/shm pages counted private while one worker maps them
    shm = [0, 150 * MiB, 300 * MiB]
    data = run([loader()], [_kinds(11, 0, [150 * MiB] * 3, [5 * MiB + s for s in shm], shmem=shm)])
    findings = find_cow_growth(data)
    assert [f.code for f in findings] == ["mapped-pages"]
    assert findings[0].severity == "info"
    assert "never raise an alarm" in findings[0].detail


def test_cow_beyond_the_suspects_offers_gc_freeze_with_the_parents_heap():
    small = {**SUSPECT, "est_bytes": 10 * MiB}
    lo = loader(suspects=[small])
    lo.gc_at_fork = {"enabled": True, "frozen": 0, "blocks": 2_500_000}
    data = run([lo], [_kinds(11, 0, [150 * MiB] * 3, [5 * MiB, 60 * MiB, 120 * MiB])])
    [finding] = find_cow_growth(data)
    assert finding.fix.startswith("Call gc.freeze()") and "~2,500,000 Python allocations" in finding.fix
    assert "`self.rows`" in finding.fix


def test_cow_explained_by_the_suspect_or_after_gc_freeze_does_not_offer_it_again():
    cow = [5 * MiB, 100 * MiB, 200 * MiB]
    explained = run([loader(suspects=[{**SUSPECT, "est_bytes": 300 * MiB}])], [_kinds(11, 0, [150 * MiB] * 3, cow)])
    assert "gc.freeze" not in find_cow_growth(explained)[0].fix
    frozen = loader()
    frozen.gc_at_fork = {"enabled": True, "frozen": 1_234, "blocks": 9}
    [finding] = find_cow_growth(run([frozen], [_kinds(11, 0, [150 * MiB] * 3, cow)]))
    assert "already called (1,234 objects frozen" in finding.fix


def test_parse_smaps_rollup_reads_kinds_and_keeps_uss():
    from dlprobe.system.procmem import parse_smaps_rollup

    text = (
        "55f559cd7000-7ffff0e37000 ---p 00000000 00:00 0                          [rollup]\n"
        "Rss:                1708 kB\nPss:                 364 kB\nPss_Anon:            112 kB\n"
        "Pss_File:            252 kB\nPss_Shmem:             0 kB\nPrivate_Clean:        72 kB\n"
        "Private_Dirty:       112 kB\nAnonymous:           112 kB\nSwap:                  0 kB\n"
    )
    values = parse_smaps_rollup(text)
    assert values == {"rss": 1708 * 1024, "uss": 184 * 1024, "pss": 364 * 1024, "swap": 0, "anon": 112 * 1024,
                      "private_dirty": 112 * 1024, "private_clean": 72 * 1024, "pss_anon": 112 * 1024,
                      "pss_file": 252 * 1024, "pss_shmem": 0}  # fmt: skip
    old_kernel = parse_smaps_rollup(text.replace("Pss_Anon", "X").replace("Pss_File", "Y").replace("Pss_Shmem", "Z"))
    assert old_kernel is not None and "pss_file" not in old_kernel and old_kernel["anon"] == 112 * 1024


def test_cow_growth_on_a_record_list_names_packed_records_for_that_attribute():
    records = {**SUSPECT, "attribute": "self.train.records", "type": "list[dict]"}
    [finding] = find_cow_growth(run([loader(suspects=[records])], [_growing(11, 0, 200 * MiB)]))
    assert "`self.train.records = PackedRecords(self.train.records)`" in finding.fix
    assert "from dlprobe.fixes import PackedRecords" in finding.fix


def _fix_for(*suspects: dict) -> str:
    [finding] = find_cow_growth(run([loader(suspects=list(suspects))], [_growing(11, 0, 200 * MiB)]))
    return finding.fix


def test_cow_growth_on_a_dict_of_records_names_packed_mapping_for_that_attribute():
    fix = _fix_for({**SUSPECT, "attribute": "self.by_id", "type": "dict[list]"})
    assert "`self.by_id` is a dict[list]" in fix and "`self.by_id = PackedMapping(self.by_id)`" in fix
    assert "from dlprobe.fixes import PackedMapping;" in fix and "PackedRecords" not in fix


def test_cow_growth_on_lists_of_numbers_and_strings_names_numpy_and_packed_records():
    assert "`self.keys = np.asarray(self.keys)` (import numpy as np;" in _fix_for(
        {**SUSPECT, "attribute": "self.keys", "type": "list[int]"}
    )
    assert "`self.paths = PackedRecords(self.paths)` (from dlprobe.fixes import PackedRecords;" in _fix_for(
        {**SUSPECT, "attribute": "self.paths", "type": "list[str]"}
    )
    assert "import numpy as np" not in _fix_for({**SUSPECT, "type": "list[str]"})
    assert "`self.rows = PackedRecords(" not in _fix_for({**SUSPECT, "type": "set[str]"})  # no shipped remedy


def test_cow_growth_gives_the_dict_and_its_list_of_keys_each_their_remedy():
    annotations = {**SUSPECT, "attribute": "self.ann", "type": "dict[list]", "items": 1_500_000, "est_bytes": 400 * MiB}
    keys = {**SUSPECT, "attribute": "self.keys", "type": "list[int]", "items": 1_500_000, "est_bytes": 55 * MiB}
    fix = _fix_for(annotations, keys)
    assert "So do `self.keys` (list[int], 1,500,000 items, ~55.0 MiB)" in fix
    assert (
        "`self.ann = PackedMapping(self.ann)`; `self.keys = np.asarray(self.keys)` (from dlprobe.fixes import "
        "PackedMapping; import numpy as np;" in fix
    )


def test_spawn_copy_of_a_dict_or_numbers_names_their_shared_remedy():
    for suspect, code in [
        ({**SUSPECT, "attribute": "self.ann", "type": "dict[list]"},
         "`self.ann = PackedMapping(self.ann, share='ann-v1')`"),
        ({**SUSPECT, "attribute": "self.keys", "type": "list[int]"},
         "`self.keys = shm_array('keys-v1', lambda: np.asarray(self.keys))` (from dlprobe.fixes import shm_array; "
         "import numpy as np)"),
    ]:  # fmt: skip
        lo = loader(start_method="spawn", num_workers=4, est_bytes=100 * MiB, suspects=[suspect])
        [finding] = find_spawn_copy(run([lo], []))
        assert code in finding.fix


def test_spawn_copy_names_shared_packed_records_for_the_largest_record_list():
    lo = loader(start_method="spawn", num_workers=4, est_bytes=100 * MiB, suspects=[SUSPECT])
    [finding] = find_spawn_copy(run([lo], []))
    assert "`self.rows = PackedRecords(self.rows, share='rows-v1')`" in finding.fix
    assert "persistent_workers=True" in finding.fix


def test_spawn_copy_without_a_record_list_names_shm_array():
    [finding] = find_spawn_copy(run([loader(start_method="spawn", num_workers=4, est_bytes=100 * MiB)], []))
    assert "shm_array(" in finding.fix and "PackedRecords" not in finding.fix


def test_every_worker_loading_the_same_data_at_start_is_named_with_the_shared_remedy():
    # np.load in worker_init_fn: Anonymous (and Private_Dirty with it) jumps by ~100 MiB at once, then stays
    step = [5 * MiB] + [105 * MiB] * 7
    workers = [_kinds(11, 0, [150 * MiB + s for s in step], step), _kinds(12, 1, [150 * MiB + s for s in step], step)]
    [finding] = find_cow_growth(run([loader()], workers))
    assert "loaded its own copy of the same data at start" in finding.title
    assert finding.evidence["variant"] == "loaded_at_start"
    assert "shm_array('data-v1', lambda: np.load(path))" in finding.fix and "mmap_mode='r'" in finding.fix
    # a cache that keeps growing is not a load: the same total, reached only at the end
    ramp = [5 * MiB + i * 15 * MiB for i in range(8)]
    workers = [_kinds(11, 0, [150 * MiB + g for g in ramp], ramp), _kinds(12, 1, [150 * MiB + g for g in ramp], ramp)]
    [finding] = find_cow_growth(run([loader()], workers))
    assert "keep allocating" in finding.title
    # one worker loading alone is not "the same data in every worker"
    flat = [5 * MiB] * 8
    workers = [_kinds(11, 0, [150 * MiB + s for s in step], step), _kinds(12, 1, [150 * MiB + f for f in flat], flat)]
    [finding] = find_cow_growth(run([loader()], workers))
    assert "keep allocating" in finding.title


# The shape of "loaded at start", at its boundaries and as a busy machine samples it: RSS readings (time, MiB above
# the parent's size at fork) with the page kinds read only now and then, as the sampler does.
def _timed(pid: int, wid: int, readings: list[tuple[float, float]], full_every: int = 3):
    n = len(readings)
    full = [i % full_every == 0 or i == n - 1 for i in range(n)]
    rss = [int((300 + mib) * MiB) for _, mib in readings]
    anon = [int((150 + mib) * MiB) if f else None for (_, mib), f in zip(readings, full, strict=True)]
    s = Series(t=[100.0 + t for t, _ in readings], rss=rss, uss=[None] * n, pss=[None] * n, swap=[None] * n)
    s.anon = list(anon)
    s.private_dirty = [a - 140 * MiB if a is not None else None for a in anon]
    s.private_clean, s.pss_anon, s.pss_file, s.pss_shmem = ([0 if f else None for f in full] for _ in range(4))
    return worker(pid, wid, s)


def _variant(*workers) -> str:
    [finding] = find_cow_growth(run([loader()], list(workers)))
    return finding.evidence["variant"]


STEP_AT_START = [(0, 0), (0.4, 30), (0.8, 96), (1.2, 96), *[(t / 4, 96) for t in range(6, 24)]]  # a real run's
# The same load on a busy machine: four times slower, and the sampler's ticks late and uneven.
STEP_BUSY = [(0, 0), (0.9, 10), (2.6, 55), (2.7, 80), (4.2, 96), (4.3, 96), (6.1, 96), (8.8, 96), (9.0, 96)]
# Nothing read between the fork and the plateau: the gap delays seeing the load, not the load.
STEP_UNSEEN = [(0, 0), (3.0, 96), (3.5, 96), (6.0, 96)]
RAMP = [(t, 96 * t / 9) for t in (0, 0.3, 1.9, 2.0, 4.4, 5.0, 5.1, 6.0, 8.0, 9.0)]  # a cache growing, sampled unevenly


@pytest.mark.parametrize("shape", [STEP_AT_START, STEP_BUSY, STEP_UNSEEN], ids=["usual", "busy", "gap"])
def test_a_load_at_start_reads_the_same_however_the_readings_fell(shape):
    assert loaded_at_start(_timed(11, 0, shape).series)
    assert _variant(_timed(11, 0, shape), _timed(12, 1, shape)) == COW_LOADED_AT_START


def test_a_cache_growing_all_along_is_not_a_load_however_unevenly_sampled():
    assert not loaded_at_start(_timed(11, 0, RAMP).series)
    assert _variant(_timed(11, 0, RAMP), _timed(12, 1, RAMP)) == COW_ALLOCATING


def test_loaded_at_start_means_done_within_the_first_half_of_the_life_seen():
    # Done is halfway between the last reading below 90% of the rise and the first above: here 4.5 of a 9 s span.
    def step(done_between: tuple[float, float]) -> list[tuple[float, float]]:
        before, after = done_between
        return [(0, 0), (before, 10), (after, 96), (after + 0.5, 96), (after + 1, 96), (9, 96)]

    assert loaded_at_start(_timed(11, 0, step((4.0, 5.0))).series)
    assert not loaded_at_start(_timed(11, 0, step((4.0, 5.2))).series)


def test_loaded_at_start_needs_the_plateau_kept_and_seen():
    dips = [(0, 0), (1, 96), (2, 96), (3, 60), (4, 96), (9, 96)]  # gave back over a fifth of it: not one load kept
    assert not loaded_at_start(_timed(11, 0, dips).series)
    unseen = [(0, 0), (0.5, 96), (9, 96)]  # a single reading after: too few to say it stayed
    assert not loaded_at_start(_timed(11, 0, unseen).series)
    assert loaded_at_start(_timed(11, 0, [*unseen[:2], (1, 96), unseen[2]]).series)


def test_a_worker_first_read_midway_through_its_load_or_after_it_still_loaded_the_same():
    # On a busy machine the sampler learns of a worker late: its first reading already holds part of the load, or
    # all of it. Its peak is the others', so it is the same data once per worker.
    midway = [(0, 40), *STEP_AT_START[2:]]
    after = [(t, 96) for t, _ in STEP_AT_START]
    assert _variant(_timed(11, 0, STEP_AT_START), _timed(12, 1, midway)) == COW_LOADED_AT_START
    assert _variant(_timed(11, 0, STEP_AT_START), _timed(12, 1, after)) == COW_LOADED_AT_START
    # ... but a worker that peaks a quarter of the load lower loaded something else
    less = [(t, mib * 0.7) for t, mib in STEP_AT_START]
    assert _variant(_timed(11, 0, STEP_AT_START), _timed(12, 1, less)) == COW_ALLOCATING


# cow-growth's threshold is what the copies cost: all workers together, projected to the end of the epoch, against
# the tightest memory limit and the parent's own size, above a floor per worker that start-up noise stays under.
RECORDS = {"attribute": "self.records", "type": "list[dict]", "items": 1_000_000, "objects": 7_000_001,
           "est_bytes": 450 * MiB}  # fmt: skip


def _copying(n: int, each: int) -> list:
    """n workers whose Private_Dirty rose by `each` while Anonymous stayed flat: copy-on-write."""
    procs = []
    for i in range(n):
        s = series([10 * MiB, 10 * MiB + each // 2, 10 * MiB + each], [300 * MiB] * 3)
        s.anon = [150 * MiB] * 3
        s.private_dirty = [10 * MiB, 10 * MiB + each // 2, 10 * MiB + each]
        s.private_clean, s.pss_anon, s.pss_file, s.pss_shmem = ([0] * 3 for _ in range(4))
        procs.append(worker(11 + i, i, s))
    return procs


def _job(each: int, parent_uss: int, n: int = 4, cgroup: int | None = None, suspects=(RECORDS,), epoch=None):
    from dlprobe.analysis.run.model import SystemSeries

    lo = loader(num_workers=n, suspects=list(suspects), epochs=[epoch] if epoch else None)
    system = SystemSeries(cgroup_limit=cgroup)
    return fakes.run([lo], [parent(parent_uss), *_copying(n, each)], system=system)


def test_four_workers_copying_61_mib_each_fire_against_a_modest_limit():
    # 245 MiB in all: under a quarter of a 2 GiB parent, but 6% of a 4 GiB cgroup limit
    [finding] = find_cow_growth(_job(61 * MiB, 2048 * MiB, cgroup=4096 * MiB))
    assert finding.evidence["total_bytes"] == 244 * MiB and finding.evidence["counted_workers"] == 4
    assert finding.evidence["limit_kind"] == "cgroup limit" and finding.evidence["limit_bytes"] == 4096 * MiB
    assert "244.0 MiB in all" in finding.title and "6% of the 4.0 GiB cgroup limit" in finding.title
    assert "PackedRecords(self.records)" in finding.fix
    # the same copies on a 24 GiB machine with no cgroup limit cost neither the limit nor the parent much
    assert find_cow_growth(_job(61 * MiB, 2048 * MiB)) == []


def test_four_workers_copying_61_mib_each_fire_against_the_parents_size():
    # the canonical first script: 1,000,000 dicts in a ~480 MiB parent; the copies hold half of it again
    [finding] = find_cow_growth(_job(61 * MiB, 480 * MiB))
    assert "51% of the parent's 480.0 MiB" in finding.title and finding.evidence["limit_kind"] == "MemTotal"


def test_start_up_noise_never_fires_even_against_a_tiny_limit():
    assert find_cow_growth(_job(5 * MiB, 100 * MiB, cgroup=256 * MiB)) == []  # 4 x 5 MiB: under the floor
    [finding] = find_cow_growth(_job(17 * MiB, 100 * MiB, cgroup=256 * MiB))  # past the floor, 27% of the limit
    assert finding.evidence["worker_floor_bytes"] == 16 * MiB


def test_without_a_python_object_suspect_the_garbage_collectors_walk_of_the_parent_is_not_blamed():
    # a torch + numpy parent: each worker's first full collection copies ~35 MiB of the interpreter's own objects
    assert find_cow_growth(_job(35 * MiB, 300 * MiB, suspects=())) == []
    [finding] = find_cow_growth(_job(35 * MiB, 300 * MiB))  # the same copies with 1M dicts to explain them
    assert finding.evidence["worker_floor_bytes"] == 16 * MiB
    [finding] = find_cow_growth(_job(70 * MiB, 300 * MiB, suspects=()))
    assert finding.evidence["worker_floor_bytes"] == 64 * MiB


def test_copies_of_an_epoch_still_running_are_judged_at_its_end():
    from dlprobe.analysis.run.model import Epoch

    # 100 of 400 batches done: 4 x 20 MiB so far, 320 MiB by the epoch's end
    running = Epoch(1, t_start=100.0, iter_s=0.1, batches=100, waits=[0.01] * 100)
    data = _job(20 * MiB, 1024 * MiB, epoch=running)
    data.loaders[0].config["dataset"]["len"] = 3200  # batch size 8: 400 batches an epoch
    [finding] = find_cow_growth(data)
    assert finding.evidence["epoch_fraction"] == 0.25
    assert 300 * MiB < finding.evidence["projected_total_bytes"] < 340 * MiB
    # three readings are too few to see a bend: the straight line is the top of the range, what was measured its foot
    assert "(80.0 MiB-" in finding.title and "by the end of the epoch" in finding.title
    assert "Projected from 25% of the epoch" in finding.detail
    assert "the parent's private memory (USS) (1.0 GiB)" in finding.detail  # the ceiling that bounded it
    assert finding.evidence["workers"][0]["projection"]["copies"]["ceiling_bytes"] == 1024 * MiB
    running.t_end = 110.0  # the same copies over a whole epoch stay under a quarter of the 1 GiB parent
    assert find_cow_growth(data) == []


FRAME = {"attribute": "self.frame", "type": "pandas.DataFrame", "items": 200_000, "objects": 400_001,
         "est_bytes": 60 * MiB, "columns": [
             {"name": "path", "dtype": "object", "python_objects": True, "objects": 200_000, "item": "str"},
             {"name": "size", "dtype": "object", "python_objects": True, "objects": 200_000, "item": "int"},
             {"name": "label", "dtype": "int64", "python_objects": False, "objects": 0},
             {"name": "caption", "dtype": "string", "python_objects": False, "arrow": True, "objects": 0}]}  # fmt: skip


def test_a_dataframe_suspect_is_fixed_column_by_column_and_its_safe_columns_named():
    lo = loader(suspects=[FRAME])
    lo.gc_at_fork = {"enabled": True, "frozen": 0, "blocks": 1_300_000}
    data = run([lo], [_growing(11, 0, 150 * MiB), _growing(12, 1, 140 * MiB)])
    [finding] = find_cow_growth(data)
    # the frame explains over a third of the copies: its remedy leads, gc.freeze() after it
    assert finding.fix.startswith("`self.frame` is a pandas.DataFrame with 200,000 items"), finding.fix
    assert "Its Python objects are in `path` (object of str, 200,000 objects), `size`" in finding.fix
    assert "`label` (int64), `caption` (Arrow-backed) hold no Python objects and are safe" in finding.fix
    assert """self.frame['path'] = self.frame['path'].astype("string[pyarrow]")""" in finding.fix
    assert "self.frame['size'] = self.frame['size'].astype('int64')" in finding.fix
    assert finding.fix.index("astype") < finding.fix.index("gc.freeze()")


def test_object_arrays_of_numbers_get_a_real_dtype_and_deques_a_packed_buffer():
    boxed = {**SUSPECT, "attribute": "self.sizes", "type": "numpy.ndarray[object]", "item": "float"}
    queue = {**SUSPECT, "attribute": "self.queue", "type": "deque[dict]"}
    data = run([loader(suspects=[boxed, queue])], [_growing(11, 0, 150 * MiB)])
    [finding] = find_cow_growth(data)
    assert "`self.sizes = self.sizes.astype('float64')`" in finding.fix
    assert "`self.queue = PackedRecords(list(self.queue))`" in finding.fix


def _cow_worker(pid: int, wid: int, dirty_mib: list[float], rss_mib: list[float] | None = None, t0: float = 100.0):
    """A worker read once a second whose Private_Dirty rose by `dirty_mib` while Anonymous stayed flat."""
    n = len(dirty_mib)
    rss = [int((300 + m) * MiB) for m in (rss_mib or [0] * n)]
    s = Series(t=[t0 + i for i in range(n)], rss=rss, uss=[int((10 + m) * MiB) for m in dirty_mib],
               pss=[None] * n, swap=[None] * n)  # fmt: skip
    s.anon = [150 * MiB] * n
    s.private_dirty = [int((10 + m) * MiB) for m in dirty_mib]
    s.private_clean, s.pss_anon, s.pss_file, s.pss_shmem = ([0] * n for _ in range(4))
    return worker(pid, wid, s)


def _parent_with_anon(anon: int):
    p = parent(anon)
    p.series.anon = [anon] * len(p.series.t)
    return p


def _running(batches: int, until: float):
    from dlprobe.analysis.run.model import Epoch

    return Epoch(1, t_start=100.0, iter_s=0.0, batches=batches, waits=[0.01] * batches, t_last_batch=until)


def test_no_worker_is_projected_to_copy_more_than_its_parents_anonymous_memory():
    # 4 workers copying 30 MiB a second, read for 10 s at 10% of the epoch: a straight line says 300 MiB each, over
    # the parent's 200 MiB of anonymous memory: each is bounded by it
    lo = loader(num_workers=4, suspects=[RECORDS], epochs=[_running(40, 109.0)])
    lo.config["dataset"]["len"] = 3200  # 400 batches of 8
    workers = [_cow_worker(11 + i, i, [3.0 * j for j in range(10)]) for i in range(4)]
    [finding] = find_cow_growth(fakes.run([lo], [_parent_with_anon(200 * MiB), *workers]))
    for row in finding.evidence["workers"]:
        copies = row["projection"]["copies"]
        assert copies["ceiling_bytes"] == 200 * MiB and copies["ceiling_source"].startswith("the parent's anonymous")
        assert copies["projected_bytes"] <= 200 * MiB and copies["projected_high_bytes"] <= 200 * MiB
    assert finding.evidence["projected_total_bytes"] <= 4 * 200 * MiB
    assert "can pass the parent's anonymous memory at fork (200.0 MiB)" in finding.detail


def test_a_copying_worker_is_projected_by_its_private_pages_not_its_rss():
    # RSS jumps at start and stays (the shape of a load), while Private_Dirty keeps rising: copies, not a load.
    # Before, the RSS shape tagged every worker loaded_at_start and nothing was projected (the 10x swing).
    rss_step = [0, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60]
    lo = loader(num_workers=2, suspects=[RECORDS], epochs=[_running(100, 111.0)])
    lo.config["dataset"]["len"] = 3200  # 400 batches: a quarter done
    workers = [_cow_worker(11 + i, i, [2.0 * j for j in range(12)], rss_step) for i in range(2)]
    [finding] = find_cow_growth(fakes.run([lo], [_parent_with_anon(400 * MiB), *workers]))
    assert all(r["loaded_at_start"] for r in finding.evidence["workers"])  # what RSS alone says
    assert finding.evidence["projected_total_bytes"] > 3 * finding.evidence["total_bytes"]  # still projected
    assert finding.evidence["measured_at_epoch_fraction"] == 0.25


def test_too_many_workers_projects_no_worker_past_what_it_could_copy():
    # too-many-workers' per-worker figure is cow-growth's: a worker copying 3 MiB a second at 10% of the epoch is
    # not drawn on a straight line to 280 MiB over a parent of 100 MiB of anonymous memory
    from dlprobe.analysis.measures.memory_fit import projected_worker_bytes

    lo = loader(num_workers=2, suspects=[RECORDS], epochs=[_running(40, 109.0)])
    lo.config["dataset"]["len"] = 3200
    workers = [_cow_worker(11 + i, i, [3.0 * j for j in range(10)]) for i in range(2)]
    projected, peak, rows = projected_worker_bytes(fakes.run([lo], [_parent_with_anon(100 * MiB), *workers]), lo)
    assert peak == 37 * MiB
    assert peak < projected <= 10 * MiB + 100 * MiB  # its start plus, at most, every page of the parent
    assert rows[0]["projection"]["copies"]["ceiling_bytes"] == 100 * MiB
