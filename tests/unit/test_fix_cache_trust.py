"""The dlprobe.fixes cache trusts only the user's own files: another user's directory or entries, links, loose
modes and tampered packed buffers are refused, never read. Real files, real chown to a second user (uid 65534)."""

from __future__ import annotations

import json
import os
import pickle
import stat
from pathlib import Path

import numpy as np
import pytest

from dlprobe.fixes import PackedMapping, PackedRecords, build_file_index, shm_array
from dlprobe.fixes import cache_dir as layout
from dlprobe.fixes.records import pack
from dlprobe.fixes.shm_cache import UnsafeCacheError
from tests.unit.test_fixes_file_index import cached_tree, image_folder_walk, make_tree

OTHER_UID = 65534  # nobody: the second user on the machine
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes files owned by another user with os.chown")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(layout.CACHE_DIR_ENV, str(root))
    return root


@pytest.fixture
def default_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default location (no $DLPROBE_CACHE_DIR), with a private folder standing in for /dev/shm."""
    parent = tmp_path / "shm"
    parent.mkdir()
    parent.chmod(0o1777)  # like /dev/shm: everyone may create in it
    monkeypatch.delenv(layout.CACHE_DIR_ENV)
    monkeypatch.setattr(layout, "DEFAULT_CACHE_PARENT", str(parent))
    return parent


class Planted:
    """A record whose unpickling writes a marker file: what another user would leave in the cache."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def plant_entry(root: Path, key: str, arr: np.ndarray, uid: int | None = OTHER_UID, mac: str | None = "0" * 64) -> None:
    """An entry as the cache writes one (.npy plus its metadata), owned by `uid`."""
    root.mkdir(mode=0o700, exist_ok=True)
    np.save(layout.data_path(root, key), arr, allow_pickle=False)
    meta = {"version": 1, "key": key, "dtype": arr.dtype.str, "shape": list(arr.shape), "nbytes": int(arr.nbytes),
            "created": 0.0, "builder_pid": 1, "mac": mac}  # fmt: skip
    layout.meta_path(root, key).write_text(json.dumps(meta))
    for path in (layout.data_path(root, key), layout.meta_path(root, key)):
        path.chmod(0o644)
        if uid is not None:
            os.chown(path, uid, uid)


def test_the_default_directory_is_the_users_own_and_private_and_so_are_its_files(default_parent: Path):
    shm_array("ints-v1", lambda: np.arange(10))
    PackedRecords([{"a": 1}], share="records-v1")
    root = default_parent / f"dlprobe-cache-{os.geteuid()}"
    assert layout.open_cache_dir() == root
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and root.stat().st_uid == os.geteuid()
    files = sorted(root.iterdir())
    assert {p.name for p in files} >= {".mac-key", "ints-v1.npy", "ints-v1.json", "records-v1.npy", "records-v1.json"}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}


@as_root
def test_another_users_default_directory_is_refused_naming_the_owner(default_parent: Path, tmp_path: Path):
    root = default_parent / f"dlprobe-cache-{os.geteuid()}"
    root.mkdir(mode=0o777)
    root.chmod(0o777)
    os.chown(root, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeCacheError) as info:
        shm_array("ints-v1", lambda: np.arange(10))
    assert f"refusing to use the dlprobe.fixes cache directory {root}: it belongs to uid {OTHER_UID}" in str(info.value)
    assert "DLPROBE_CACHE_DIR" in info.value.hint and "rm -rf" in info.value.hint
    assert list(root.iterdir()) == []  # nothing written into it either


@as_root
def test_another_users_directory_given_by_the_user_is_refused(cache: Path):
    cache.mkdir(mode=0o755)
    os.chown(cache, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeCacheError, match=f"it belongs to uid {OTHER_UID}"):
        PackedRecords([1, 2], share="records-v1")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_directory_others_may_write_is_refused(cache: Path, mode: int):
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(UnsafeCacheError, match=f"its mode {mode:04o} lets group or other users in"):
        shm_array("ints-v1", lambda: np.arange(10))


def test_the_default_directory_others_may_read_is_refused_a_chosen_one_may_be_read(
    default_parent: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
):
    root = default_parent / f"dlprobe-cache-{os.geteuid()}"
    root.mkdir()
    root.chmod(0o755)
    with pytest.raises(UnsafeCacheError, match="mode 0755 .*may only be read or written by you.*chmod 700"):
        shm_array("ints-v1", lambda: np.arange(10))
    cache.mkdir()
    cache.chmod(0o755)
    monkeypatch.setenv(layout.CACHE_DIR_ENV, str(cache))  # the user's own choice: readable is theirs to decide
    assert int(shm_array("ints-v1", lambda: np.arange(10)).sum()) == 45


def test_a_linked_directory_is_refused(cache: Path, tmp_path: Path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    cache.symlink_to(real)
    with pytest.raises(UnsafeCacheError, match="directory .* it is a symbolic link"):
        shm_array("ints-v1", lambda: np.arange(10))


@as_root
def test_another_users_records_under_the_readmes_key_are_refused_and_never_unpickled(cache: Path, tmp_path: Path):
    marker = tmp_path / "planted-code-ran"
    plant_entry(cache, "train-records-v1", pack([Planted(marker)] * 3))
    with pytest.raises(UnsafeCacheError) as info:
        PackedRecords(lambda: [{"path": "/data/0.jpg", "label": 0}], share="train-records-v1")
    assert f"entry {layout.meta_path(cache, 'train-records-v1')}: it belongs to uid {OTHER_UID}" in str(info.value)
    assert "dlprobe cache clear train-records-v1" in info.value.hint
    assert not marker.exists()
    [entry] = layout.entries(cache)  # listed with its problem, so that `dlprobe cache clear` can remove it
    assert entry.key == "train-records-v1" and "uid 65534" in (entry.problem or "")
    assert layout.remove(cache, "train-records-v1") and layout.entries(cache) == []


@as_root
def test_another_users_array_data_is_refused_never_returned(cache: Path):
    shm_array("features-v1", lambda: np.zeros(4))  # the user's own entry ...
    planted = cache / "planted.npy"
    np.save(planted, np.full(4, 666.0))
    os.chown(planted, OTHER_UID, OTHER_UID)
    os.replace(planted, layout.data_path(cache, "features-v1"))  # ... whose data another user's file replaced
    with pytest.raises(UnsafeCacheError, match=f"features-v1.npy: it belongs to uid {OTHER_UID}"):
        shm_array("features-v1", lambda: np.zeros(4))


def test_a_linked_entry_is_refused(cache: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    shm_array("ints-v1", lambda: np.arange(10), cache_dir=elsewhere)  # a valid entry of this user, elsewhere
    cache.mkdir(mode=0o700)
    layout.meta_path(cache, "ints-v1").write_bytes(layout.meta_path(elsewhere, "ints-v1").read_bytes())
    layout.data_path(cache, "ints-v1").symlink_to(layout.data_path(elsewhere, "ints-v1"))
    with pytest.raises(UnsafeCacheError, match=r"ints-v1.npy: it is a symbolic link"):
        shm_array("ints-v1", None)
    layout.data_path(cache, "ints-v1").unlink()
    layout.data_path(cache, "ints-v1").write_bytes(layout.data_path(elsewhere, "ints-v1").read_bytes())
    layout.meta_path(cache, "ints-v1").unlink()
    layout.meta_path(cache, "ints-v1").symlink_to(layout.meta_path(elsewhere, "ints-v1"))
    with pytest.raises(UnsafeCacheError, match=r"ints-v1.json: it is a symbolic link"):
        shm_array("ints-v1", None)


def test_an_entry_others_may_write_is_refused(cache: Path):
    shm_array("ints-v1", lambda: np.arange(10))
    layout.data_path(cache, "ints-v1").chmod(0o666)
    with pytest.raises(UnsafeCacheError, match="ints-v1.npy: its mode 0666 lets group or other users change it"):
        shm_array("ints-v1", None)


def test_changed_or_unsigned_packed_records_are_refused_never_unpickled(cache: Path, tmp_path: Path):
    marker = tmp_path / "planted-code-ran"
    records = PackedRecords([{"label": i} for i in range(5)], share="records-v1")
    assert records[4] == {"label": 4}
    data = layout.data_path(cache, "records-v1")
    changed = np.load(data).copy()
    changed[-1] ^= 1  # one bit of the last record
    np.save(data, changed)
    with pytest.raises(UnsafeCacheError, match="'records-v1' .* does not match its signature.*refusing to unpickle"):
        PackedRecords([{"label": i} for i in range(5)], share="records-v1")
    plant_entry(cache, "other-v1", pack([Planted(marker)]), uid=None, mac=None)  # this user's, but not signed
    json_meta = json.loads(layout.meta_path(cache, "other-v1").read_text())
    assert json_meta["mac"] is None
    with pytest.raises(UnsafeCacheError, match="'other-v1' .* is not signed with your key"):
        PackedRecords([1], share="other-v1")
    # a spawn worker attaches by key: the same checks there
    with pytest.raises(UnsafeCacheError, match="is not signed with your key"):
        pickle.loads(pickle.dumps(PackedMapping({1: 2}, share="mapxx-v1")).replace(b"mapxx-v1", b"other-v1"))
    assert not marker.exists()


def test_an_array_of_python_objects_in_the_cache_is_refused_without_unpickling_it(cache: Path, tmp_path: Path):
    marker = tmp_path / "planted-code-ran"
    cache.mkdir(mode=0o700)
    np.save(layout.data_path(cache, "objs-v1"), np.array([Planted(marker)], dtype=object), allow_pickle=True)
    layout.data_path(cache, "objs-v1").chmod(0o600)
    layout.meta_path(cache, "objs-v1").write_text(json.dumps({"version": 1, "key": "objs-v1"}))
    with pytest.raises(UnsafeCacheError, match="holds Python objects"):
        shm_array("objs-v1", None)
    assert not marker.exists()


@as_root
def test_a_file_index_cache_file_of_another_user_is_not_read(tmp_path: Path):
    """Another user's index could name any files as the dataset's samples: it is ignored, with a warning."""
    root, cache, cached = cached_tree(tmp_path)
    planted_root = tmp_path / "planted"
    make_tree(planted_root)
    (planted_root / "cat" / "planted.jpg").write_bytes(b"")
    build_file_index(planted_root, cache_dir=tmp_path / "elsewhere")
    [planted] = list((tmp_path / "elsewhere").iterdir())
    os.chown(planted, OTHER_UID, OTHER_UID)
    os.replace(planted, cached)  # same name: the cache file of `root`, now another user's
    with pytest.warns(UserWarning, match=f"ignoring the unreadable file index cache .*belongs to uid {OTHER_UID}"):
        index = build_file_index(root, cache_dir=cache)
    assert index.from_cache is False and list(index) == image_folder_walk(str(root))[1]
    assert cached.stat().st_uid == os.geteuid()  # rebuilt: the user's own file replaced it


def test_a_file_index_cache_folder_others_may_write_is_not_used(tmp_path: Path):
    root, cache, cached = cached_tree(tmp_path)
    cache.chmod(0o777)
    with pytest.warns(UserWarning, match="not using the file index cache: .* mode 0777 lets group or other"):
        index = build_file_index(root, cache_dir=cache)
    assert index.from_cache is False and list(index) == image_folder_walk(str(root))[1]


def test_a_file_index_cache_write_follows_no_link(tmp_path: Path):
    root, cache, cached = cached_tree(tmp_path)
    cached.unlink()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    Path(f"{cached}.{os.getpid()}.tmp").symlink_to(victim)  # where this process writes its temporary file
    assert build_file_index(root, cache_dir=cache).from_cache is False
    assert victim.read_text() == "keep me" and cached.is_file() and not cached.is_symlink()
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600
