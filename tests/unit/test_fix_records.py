"""dlprobe.fixes.PackedRecords: the same records back, one buffer, a shared copy through /dev/shm."""

from __future__ import annotations

import pickle
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from dlprobe.fixes import PackedRecords
from dlprobe.fixes import cache_dir as layout

RECORDS = [{"path": f"/data/{i}.jpg", "label": i % 3} for i in range(50)] + [("a", 1), "text", None, 3.5, [1, [2]]]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(layout.CACHE_DIR_ENV, str(root))
    return root


def test_round_trip_every_record_and_negative_indices():
    packed = PackedRecords(RECORDS)
    assert len(packed) == len(RECORDS) and list(packed) == RECORDS
    assert packed[-1] == [1, [2]] and packed[-len(RECORDS)] == RECORDS[0]
    assert packed[np.int64(3)] == RECORDS[3]
    assert packed[2:60:7] == RECORDS[2:60:7] and packed[::-1] == RECORDS[::-1]
    for bad in (len(RECORDS), -len(RECORDS) - 1):
        with pytest.raises(IndexError, match=f"record index {bad} out of range for {len(RECORDS)} records"):
            packed[bad]


def test_records_are_one_buffer_not_python_objects():
    packed = PackedRecords(RECORDS)
    assert packed[0] is not packed[0]  # decoded on each read, so no shared object's refcount is touched
    assert "PackedRecords(55 records" in repr(packed)


def test_the_probe_sees_a_private_buffer_as_bytes_to_copy_and_never_as_a_cow_suspect():
    from dlprobe.in_training.dataset_inspect import summarize_dataset

    class Holder:
        def __init__(self, records):
            self.records = records

    plain = summarize_dataset(Holder([{"i": i} for i in range(20_000)]))
    assert plain["suspects"][0]["attribute"] == "self.records"
    packed = PackedRecords([{"i": i} for i in range(20_000)])
    private = summarize_dataset(Holder(packed))
    assert private["suspects"] == [] and private["est_bytes"] >= packed.nbytes  # spawn-copy counts it
    shared = summarize_dataset(Holder(PackedRecords([{"i": i} for i in range(20_000)], share="probe-v1")))
    assert shared["suspects"] == [] and shared["est_bytes"] < 1000  # only mapped, never pickled


def test_an_empty_list_works():
    packed = PackedRecords([])
    assert len(packed) == 0 and list(packed) == [] and packed[:] == []
    with pytest.raises(IndexError):
        packed[0]


def test_an_unpicklable_record_is_named_by_index_and_type():
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"record 2 \(_thread.lock\) cannot be pickled"):
        PackedRecords(["ok", {"a": 1}, lock, lambda: 0])


def test_pickling_a_private_buffer_copies_it():
    packed = PackedRecords(RECORDS)
    clone = pickle.loads(pickle.dumps(packed))
    assert list(clone) == RECORDS and clone.key is None


def test_shared_records_pickle_as_their_key_and_attach_to_the_same_file(cache: Path):
    packed = PackedRecords(RECORDS, share="recs-v1")
    data = pickle.dumps(packed)
    assert len(data) < 200  # only the key travels to a spawn worker
    clone = pickle.loads(data)
    assert list(clone) == RECORDS and clone.key == "recs-v1"
    assert sys.getsizeof(clone) < 200
    [entry] = layout.entries(cache)
    assert entry.key == "recs-v1" and entry.nbytes == packed.nbytes


def test_a_loader_function_runs_only_in_the_process_that_packs():
    calls = []

    def load():
        calls.append(1)
        return RECORDS

    first = PackedRecords(load, share="lazy-v1")
    second = PackedRecords(load, share="lazy-v1")  # another rank on the node: attaches
    assert calls == [1] and list(second) == list(first) == RECORDS


def test_stale_shared_records_of_another_length_are_refused():
    PackedRecords(RECORDS, share="data-v1")
    with pytest.raises(ValueError, match=r"'data-v1' holds 55 records but 3 were passed.*dlprobe cache clear data-v1"):
        PackedRecords([1, 2, 3], share="data-v1")


def test_a_bad_share_key_is_refused():
    with pytest.raises(ValueError, match="cache key 'a/b' is not valid"):
        PackedRecords(RECORDS, share="a/b")
