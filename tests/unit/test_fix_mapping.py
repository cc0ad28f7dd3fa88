"""dlprobe.fixes.PackedMapping: the same dict back by key, one buffer with a key index, a shared copy in /dev/shm."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dlprobe.fixes import PackedMapping, PackedRecords
from dlprobe.fixes import cache_dir as layout
from dlprobe.fixes.mapping import key_hash

ANNOTATIONS = {f"img_{i:06d}": [f"/data/{i}.jpg", i % 80, 0.5] for i in range(2_000)} | {
    7: "an int key",
    ("a", 1): {"nested": [1, 2]},
    b"raw": None,
}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(layout.CACHE_DIR_ENV, str(root))
    return root


def test_round_trip_every_key_and_value():
    packed = PackedMapping(ANNOTATIONS)
    assert len(packed) == len(ANNOTATIONS) and dict(packed.items()) == ANNOTATIONS
    assert set(packed.keys()) == set(ANNOTATIONS) and packed == ANNOTATIONS
    assert packed["img_000042"] == ["/data/42.jpg", 42, 0.5] and packed[("a", 1)] == {"nested": [1, 2]}
    assert packed[b"raw"] is None and b"raw" in packed and packed.get(7) == "an int key"
    assert packed["img_000042"] is not packed["img_000042"]  # decoded on each read: no shared object is touched


def test_keys_read_from_a_numpy_array_find_the_python_keys():
    import numpy as np

    packed = PackedMapping({7: "seven", 2**40: "big"})
    keys = np.asarray([7, 2**40])  # cow-growth's remedy for the list of keys beside the dict
    assert [packed[k] for k in keys] == ["seven", "big"] and keys[0] in packed


def test_a_missing_key_is_a_key_error_like_a_dicts():
    packed = PackedMapping(ANNOTATIONS)
    for missing in ("img_999999", 8, ("a", 2), [1]):  # [1] cannot be a dict key: not found either
        with pytest.raises(KeyError):
            packed[missing]
        assert missing not in packed and packed.get(missing, "default") == "default"


def test_keys_with_the_same_hash_are_told_apart_by_the_key(monkeypatch: pytest.MonkeyPatch):
    import dlprobe.fixes.mapping as mapping

    monkeypatch.setattr(mapping, "key_hash", lambda key: len(str(key)))  # "a" and "b" collide
    packed = PackedMapping({"a": 1, "b": 2, "cc": 3})
    assert (packed["a"], packed["b"], packed["cc"]) == (1, 2, 3)
    with pytest.raises(KeyError):
        packed["d"]


def test_the_key_hash_is_the_same_in_every_process():
    assert key_hash("img_000001") == key_hash("img_000001") != key_hash("img_000002")
    # another interpreter, with another salt for Python's own hash() of a str, finds the same keys
    code = "from dlprobe.fixes.mapping import key_hash; print(key_hash('img_000001'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(other.stdout) == key_hash("img_000001")


def test_an_empty_mapping_works():
    packed = PackedMapping({})
    assert len(packed) == 0 and list(packed) == [] and "x" not in packed


def test_a_dict_given_to_packed_records_is_refused_with_the_mapping_remedy():
    with pytest.raises(TypeError, match=r"for a dict use PackedMapping\(mapping\)"):
        PackedRecords(ANNOTATIONS)


def test_pickling_a_private_buffer_copies_it():
    clone = pickle.loads(pickle.dumps(PackedMapping(ANNOTATIONS)))
    assert dict(clone.items()) == ANNOTATIONS and clone.key is None


def test_a_shared_mapping_pickles_as_its_key_and_attaches_to_the_same_file(cache: Path):
    packed = PackedMapping(ANNOTATIONS, share="ann-v1")
    data = pickle.dumps(packed)
    assert len(data) < 200 and sys.getsizeof(pickle.loads(data)) < 200  # only the key travels to a spawn worker
    [entry] = layout.entries(cache)
    assert entry.key == "ann-v1" and entry.nbytes == packed.nbytes
    calls = []
    again = PackedMapping(lambda: calls.append(1) or {}, share="ann-v1")  # another rank: attaches, never builds
    assert calls == [] and again["img_000010"] == ANNOTATIONS["img_000010"]
    with pytest.raises(ValueError, match="holds 2,003 keys but 1 were passed"):
        PackedMapping({"x": 1}, share="ann-v1")


def _lookup(packed: PackedMapping, key: str, out) -> None:
    out.put(packed[key])


def test_a_spawn_worker_reads_the_shared_mapping_by_key():
    packed = PackedMapping(ANNOTATIONS, share="spawned-v1")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_lookup, args=(packed, "img_001999", out))
    proc.start()
    assert out.get(timeout=60) == ["/data/1999.jpg", 1999 % 80, 0.5]
    proc.join(timeout=60)
    assert proc.exitcode == 0


def test_the_probe_sees_the_packed_mapping_as_bytes_to_copy_and_never_as_a_cow_suspect():
    from dlprobe.in_training.dataset_inspect import summarize_dataset

    class Holder:
        def __init__(self, annotations):
            self.annotations = annotations

    plain = summarize_dataset(Holder(ANNOTATIONS | {i: [i] for i in range(20_000)}))
    assert plain["suspects"][0]["attribute"] == "self.annotations"
    packed = PackedMapping(ANNOTATIONS | {i: [i] for i in range(20_000)})
    private = summarize_dataset(Holder(packed))
    assert private["suspects"] == [] and private["est_bytes"] >= packed.nbytes  # spawn-copy counts it
    shared = summarize_dataset(Holder(PackedMapping(ANNOTATIONS, share="probe-v1")))
    assert shared["suspects"] == [] and shared["est_bytes"] < 1000  # only mapped, never pickled
