"""measures/attr_growth.py on fake worker_attrs events, and cow-growth's allocation story naming what it finds."""

from __future__ import annotations

from dlprobe.analysis.findings.memory import find_cow_growth
from dlprobe.analysis.measures.attr_growth import ATTR_MIN_ITEMS, ENDS_WITH_EPOCH, KEPT, THROWN_AWAY, grown_attributes
from dlprobe.analysis.run.model import Epoch
from tests.unit import fakes
from tests.unit.fakes import MiB, loader, parent, series, worker


def _attrs(pid: int, t: float, phase: str, batches: int, **attrs: int) -> dict:
    return {"ev": "worker_attrs", "t": t, "pid": pid, "loader": 0, "worker_id": pid % 2, "phase": phase,
            "batches": batches, "attrs": {f"self.{k}": v for k, v in attrs.items()}}  # fmt: skip


def _epochs(pids_per_epoch: list[list[int]]) -> list[Epoch]:
    return [Epoch(i, 100.0 + 10 * i, 0.1, worker_pids=pids) for i, pids in enumerate(pids_per_epoch)]


def _cache_events(pids: list[int], end: int, t0: float = 100.0, start: int = 0, **others: int) -> list[dict]:
    """Each worker's cache from `start` to `end` items over 10 batches of 8 (a tick midway), other attributes flat."""
    out = []
    for pid in pids:
        out += [_attrs(pid, t0, "start", 0, cache=start, **others),
                _attrs(pid, t0 + 1, "tick", 5, cache=(start + end) // 2, **others),
                _attrs(pid, t0 + 2, "end", 10, cache=end, **others)]  # fmt: skip
    return out


def _loader(epochs: list[list[int]], persistent: bool = False):
    record = loader(epochs=_epochs(epochs))
    record.config["persistent_workers"] = persistent
    return record


def test_a_cache_each_epochs_new_workers_begin_again_is_thrown_away():
    epochs = [[11, 12], [21, 22], [31, 32]]
    events = [e for i, pids in enumerate(epochs) for e in _cache_events(pids, 80, t0=100.0 + 10 * i, labels=500)]
    rows = grown_attributes(fakes.run([_loader(epochs)], [], events=events), _loader(epochs))
    [row] = rows  # self.labels held 500 items all along: not grown
    assert row["attribute"] == "self.cache" and row["fate"] == THROWN_AWAY
    assert (row["workers"], row["grown_workers"], row["epochs"]) == (6, 6, 3)
    assert (row["start_items_min"], row["end_items_max"], row["grown_items"]) == (0, 80, 480)
    assert row["samples_fetched"] == 6 * 10 * 8 and row["items_per_sample"] == 1.0


def test_one_epoch_of_workers_goes_with_the_epoch_and_persistent_workers_keep_it():
    one = [[11, 12]]
    [row] = grown_attributes(fakes.run([_loader(one)], [], events=_cache_events([11, 12], 80)), _loader(one))
    assert row["fate"] == ENDS_WITH_EPOCH
    # persistent: the first epoch's event lists its workers, the later ones none (epochs begin at 100, 110, 120);
    # the workers read last at 115 served the first two
    same = [[11, 12], [], []]
    events = _cache_events([11, 12], 160) + [_attrs(pid, 115.0, "tick", 20, cache=200) for pid in (11, 12)]
    [row] = grown_attributes(fakes.run([_loader(same, True)], [], events=events), _loader(same, True))
    assert row["fate"] == KEPT and row["epochs"] == 2 and row["end_items_max"] == 200


def test_new_workers_that_begin_where_the_last_ended_do_not_show_it_thrown_away():
    epochs = [[11, 12], [21, 22]]
    events = _cache_events([11, 12], 80) + _cache_events([21, 22], 160, t0=110.0, start=80)
    [row] = grown_attributes(fakes.run([_loader(epochs)], [], events=events), _loader(epochs))
    assert row["fate"] is None


def test_growth_under_the_threshold_or_in_no_attribute_is_nothing():
    epochs = [[11, 12]]
    small = _cache_events([11, 12], ATTR_MIN_ITEMS - 1)
    assert grown_attributes(fakes.run([_loader(epochs)], [], events=small), _loader(epochs)) == []
    at = _cache_events([11, 12], ATTR_MIN_ITEMS)
    assert len(grown_attributes(fakes.run([_loader(epochs)], [], events=at), _loader(epochs))) == 1
    empty = [_attrs(11, 100.0, "start", 0), _attrs(11, 102.0, "end", 10)]
    assert grown_attributes(fakes.run([_loader(epochs)], [], events=empty), _loader(epochs)) == []


def test_an_attribute_made_after_the_start_grows_from_absent_and_a_worker_without_a_start_is_left_out():
    epochs = [[11, 12]]
    events = [_attrs(11, 100.0, "start", 0), _attrs(11, 102.0, "end", 10, seen=40),
              _attrs(12, 101.0, "tick", 5, seen=900)]  # fmt: skip
    [row] = grown_attributes(fakes.run([_loader(epochs)], [], events=events), _loader(epochs))
    assert (row["attribute"], row["workers"], row["start_items_max"], row["end_items_max"]) == ("self.seen", 1, 0, 40)


def _allocating(pid: int, wid: int):
    """A worker whose anonymous memory rose by 195 MiB: new allocations, not copy-on-write."""
    grow = [5 * MiB, 100 * MiB, 200 * MiB]
    s = series(grow, [150 * MiB + g for g in grow])
    s.anon, s.private_dirty, s.private_clean = [150 * MiB + g for g in grow], list(grow), [0] * 3
    s.pss_anon, s.pss_file, s.pss_shmem = list(grow), [0] * 3, [0] * 3
    return worker(pid, wid, s)


def _cow_run(events: list[dict], epochs: list[list[int]], persistent: bool = False):
    pids = [p for e in epochs for p in e]
    procs = [parent(300 * MiB), *(_allocating(p, i % 2) for i, p in enumerate(pids))]
    return fakes.run([_loader(epochs, persistent)], procs, events=events)


def test_the_allocation_story_names_the_attribute_its_growth_and_its_loss_at_each_epochs_end():
    epochs = [[11, 12], [21, 22], [31, 32]]
    events = [e for i, pids in enumerate(epochs) for e in _cache_events(pids, 80, t0=100.0 + 10 * i)]
    [finding] = find_cow_growth(_cow_run(events, epochs))
    assert finding.evidence["variant"] == "allocating"
    assert finding.evidence["growing_attributes"][0]["attribute"] == "self.cache"
    assert "keep allocating (`self.cache` grows in each)" in finding.title
    assert (
        "`self.cache` grew from 0 to 80 items in each of the 6 workers (1 per sample fetched); each epoch's new "
        "workers begin it again: a worker's cache is thrown away at each epoch's end"
    ) in finding.detail
    assert finding.fix.startswith("Fill `self.cache` in the parent before the DataLoader is built")
    assert "persistent_workers=True and bound `self.cache`" in finding.fix and "np.memmap" in finding.fix


def test_persistent_workers_each_keeping_a_cache_get_the_bound_first():
    epochs = [[11, 12], [11, 12]]
    [finding] = find_cow_growth(_cow_run(_cache_events([11, 12], 160), epochs, persistent=True))
    assert "each keeps its own cache from epoch to epoch" in finding.detail
    assert "thrown away" not in finding.detail and finding.fix.startswith("Bound `self.cache`")


def test_allocations_no_attribute_explains_say_nothing_about_attributes():
    epochs = [[11, 12]]
    flat = [e for e in _cache_events([11, 12], 5000, start=5000)]  # counted, but never grown
    for events in ([], flat):
        [finding] = find_cow_growth(_cow_run(events, epochs))
        assert "growing_attributes" not in finding.evidence
        words = finding.title + finding.detail + finding.fix
        assert "self.cache" not in words and "grew from" not in words and "thrown away" not in words
        assert "Look for state that grows in __getitem__" in finding.fix


def test_one_epoch_of_workers_is_told_it_goes_with_the_epoch_never_that_a_next_one_began_it_again():
    [finding] = find_cow_growth(_cow_run(_cache_events([11, 12], 80), [[11, 12]]))
    assert "`self.cache` grew from 0 to 80 items in each of the 2 workers" in finding.detail
    assert "goes with it when its epoch ends" in finding.detail and "thrown away at each epoch's end" not in (
        finding.detail)  # fmt: skip
