"""dlprobe.fixes.shm_array: build once under a lock, map everywhere, never map half an array; real processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dlprobe.fixes import cache_dir as layout
from dlprobe.fixes.shm_cache import ShmCacheError, shm_array
from tests.conftest import needs_small_shm, run_with_small_shm

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache directory per test, so nothing is left in /dev/shm and tests never share keys."""
    root = tmp_path / "cache"
    monkeypatch.setenv(layout.CACHE_DIR_ENV, str(root))
    return root


def test_first_call_builds_later_calls_map_the_same_read_only_file(cache: Path):
    calls = []

    def build():
        calls.append(1)
        return np.arange(1000, dtype=np.int32)

    first = shm_array("ints-v1", build)
    again = shm_array("ints-v1", build)
    assert calls == [1]
    assert isinstance(again, np.memmap) and str(again.filename) == str(cache / "ints-v1.npy")
    assert np.array_equal(first, np.arange(1000)) and np.array_equal(again, first)
    with pytest.raises(ValueError, match="read-only"):
        again[0] = 5
    [entry] = layout.entries(cache)
    assert (entry.key, entry.nbytes, entry.dtype, entry.shape) == ("ints-v1", 4000, "<i4", [1000])
    assert entry.builder_pid == os.getpid() and entry.pids == [os.getpid()]  # this process maps it


@pytest.mark.parametrize("key", ["a/b", "../etc", ".hidden", "", "x" * 201, "sp ace"])
def test_bad_keys_are_refused_naming_the_key(key: str):
    with pytest.raises(ValueError, match="cache key .* is not valid.*no '/'") as info:
        shm_array(key, lambda: np.zeros(1))
    assert repr(key) in str(info.value)


def test_attaching_to_a_missing_key_says_so():
    with pytest.raises(ShmCacheError, match="no cached array 'nothing-here'"):
        shm_array("nothing-here", None)


def test_object_arrays_are_refused():
    with pytest.raises(TypeError, match="holds Python objects.*PackedRecords"):
        shm_array("objs", lambda: np.array([{"a": 1}], dtype=object))


def test_a_missing_dev_shm_is_an_error_with_a_way_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(layout.CACHE_DIR_ENV, str(tmp_path / "no-such-tmpfs" / "cache"))
    with pytest.raises(ShmCacheError, match="does not exist.*mount -t tmpfs.*DLPROBE_CACHE_DIR"):
        shm_array("k", lambda: np.zeros(1))


def test_too_little_room_names_the_numbers_and_how_to_grow_it(cache: Path, monkeypatch: pytest.MonkeyPatch):
    tiny = SimpleNamespace(f_bavail=256, f_frsize=4096, f_blocks=1024)  # 1 MiB free of 4 MiB
    monkeypatch.setattr("dlprobe.fixes.shm_cache.os.statvfs", lambda _path: tiny)
    with pytest.raises(ShmCacheError) as info:
        shm_array("big", lambda: np.zeros(2 * MiB, dtype=np.uint8))
    message = str(info.value)
    assert "needs 2.0 MiB but only 1.0 MiB of 4.0 MiB is free" in message
    assert "mount -o remount,size=8G /dev/shm" in message and "--shm-size=8g" in message
    assert layout.entries(cache) == [] and not [p for p in cache.iterdir() if p.suffix in (".npy", ".tmp")]


@needs_small_shm
def test_a_real_full_dev_shm_is_refused_before_writing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(layout.CACHE_DIR_ENV)  # the default, /dev/shm/dlprobe-cache-<uid>, in a private 1 MiB tmpfs
    code = "import numpy as np; from dlprobe.fixes import shm_array; shm_array('big', lambda: np.zeros(4 << 20, 'u1'))"
    proc = run_with_small_shm("1M", f'{sys.executable} -c "{code}"')
    assert proc.returncode == 1
    uid = os.geteuid()
    assert f"ShmCacheError: [Errno 28] no room for cached array 'big' in /dev/shm/dlprobe-cache-{uid}" in proc.stderr
    assert "needs 4.0 MiB but only 1.0 MiB of 1.0 MiB is free" in proc.stderr


def _builder(key: str, barrier, log: str, out) -> None:  # runs in a child process
    def build():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return np.arange(2 * MiB, dtype=np.int64)

    barrier.wait()  # every process asks at the same moment
    arr = shm_array(key, build)
    out.put((os.getpid(), int(arr.sum()), str(arr.filename)))


def test_concurrent_builders_in_separate_processes_build_once(tmp_path: Path, cache: Path):
    ctx = multiprocessing.get_context("fork")
    n = 4
    barrier, out, log = ctx.Barrier(n), ctx.Queue(), str(tmp_path / "builds.log")
    procs = [ctx.Process(target=_builder, args=("shared-v1", barrier, log, out)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * n
    builders = Path(log).read_text().split()
    assert len(builders) == 1  # build_fn ran once, in one of the processes
    expected = int(np.arange(2 * MiB, dtype=np.int64).sum())
    assert {r[1] for r in results} == {expected} and {r[2] for r in results} == {str(cache / "shared-v1.npy")}
    [entry] = layout.entries(cache)
    assert str(entry.builder_pid) == builders[0]


def _dies_mid_write(key: str, ready: str) -> None:  # runs in a child process
    real = np.lib.format.write_array

    def half_then_hang(f, arr, **kw):
        real(f, arr[: arr.size // 2], **kw)  # half the array reaches the temporary file...
        f.flush()
        Path(ready).touch()
        time.sleep(600)  # ...and the builder is killed here

    np.lib.format.write_array = half_then_hang
    shm_array(key, lambda: np.ones(MiB, dtype=np.uint8))


def test_a_builder_killed_mid_write_leaves_nothing_mapped_and_the_next_one_rebuilds(tmp_path: Path, cache: Path):
    ctx = multiprocessing.get_context("fork")
    ready = tmp_path / "ready"
    proc = ctx.Process(target=_dies_mid_write, args=("half-v1", str(ready)))
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), "the builder never started writing"
        assert [p.name for p in cache.glob(".half-v1.*.tmp")] == [f".half-v1.{proc.pid}.tmp"]
        assert layout.entries(cache) == []  # the half-written file is not an entry
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the builder dies mid-write (also when an assertion above failed)
        proc.join(timeout=60)
    with pytest.raises(ShmCacheError, match="no cached array"):
        shm_array("half-v1", None)  # the lock is free again; nothing half-written is mapped
    assert list(cache.glob(".half-v1.*.tmp")) == []  # and the dead builder's file is gone
    arr = shm_array("half-v1", lambda: np.full(MiB, 7, dtype=np.uint8))
    assert arr.shape == (MiB,) and int(arr.min()) == int(arr.max()) == 7


def test_data_without_metadata_is_rebuilt(cache: Path):
    """A builder killed between renaming the data and writing the metadata: the entry is not complete."""
    shm_array("late-v1", lambda: np.zeros(10))
    layout.meta_path(cache, "late-v1").unlink()
    arr = shm_array("late-v1", lambda: np.ones(10))
    assert arr.sum() == 10


def test_remove_refuses_while_a_builder_holds_the_lock(cache: Path):
    shm_array("busy-v1", lambda: np.zeros(10))
    with layout.key_lock(cache, "busy-v1"):
        assert layout.remove(cache, "busy-v1") is False
    assert layout.remove(cache, "busy-v1") is True
    assert sorted(p.name for p in cache.iterdir()) == []
