"""`shm_array(key, build_fn)`: one read-only array in /dev/shm, built once, mapped by every process and run.

Before (every experiment of a grid search, every rank and every spawn worker holds its own copy)::

    features = np.load("features.npy")            # 1 GB per process

After (the first process builds it; every other one, in this run or the next, maps the same pages)::

    from dlprobe.fixes import shm_array
    features = shm_array("features-v1", lambda: np.load("features.npy"))

The builder works under an flock on the key, writes a temporary file and renames it into place, so no process
ever maps a half-written array; a builder killed mid-way leaves a temporary file that the next builder removes.
The key names the data: change it (or `dlprobe cache clear KEY`) when the data changes.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dlprobe.fixes import cache_dir as layout
from dlprobe.units import format_bytes

META_VERSION = 1


class ShmCacheError(OSError):
    """/dev/shm (or $DLPROBE_CACHE_DIR) is missing, too small, or the key has no entry to attach to."""


def _root(cache_dir: str | os.PathLike[str] | None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else layout.cache_dir()
    if not root.parent.is_dir():
        raise ShmCacheError(
            errno.ENOENT,
            f"{root.parent} does not exist, so the array cache has nowhere to live; mount a tmpfs there "
            f"(`mount -t tmpfs -o size=8G tmpfs {root.parent}`) or set {layout.CACHE_DIR_ENV} to a directory on one",
        )
    root.mkdir(mode=0o777, exist_ok=True)
    return root


def _check_room(root: Path, key: str, needed: int) -> None:
    """Refuse before writing: a tmpfs that fills up mid-write fails late, and a full /dev/shm breaks every
    DataLoader on the machine (workers pass batches through it)."""
    st = os.statvfs(root)
    free = st.f_bavail * st.f_frsize
    if needed > free:
        total = st.f_blocks * st.f_frsize
        raise ShmCacheError(
            errno.ENOSPC,
            f"no room for cached array {key!r} in {root}: it needs {format_bytes(needed)} but only "
            f"{format_bytes(free)} of {format_bytes(total)} is free; {layout.GROW_HINT}",
        )


def _map(root: Path, key: str) -> np.ndarray:
    path = layout.data_path(root, key)
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:  # an empty array has no pages to map
        arr = np.load(path)
        if arr.size:
            raise
        arr.flags.writeable = False
        return arr


def _write(root: Path, key: str, arr: np.ndarray) -> None:
    """Write arr to a temporary file with plain writes (a full tmpfs then fails with ENOSPC, where a memory map
    would die of SIGBUS), then rename it into place and write the metadata that marks the entry complete."""
    tmp = layout.tmp_path(root, key, os.getpid())
    try:
        with open(tmp, "wb") as f:
            np.lib.format.write_array(f, arr, allow_pickle=False)
        os.replace(tmp, layout.data_path(root, key))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            _check_room(root, key, arr.nbytes)  # names the numbers when the shortage is still there
            raise ShmCacheError(errno.ENOSPC, f"{root} filled up while writing {key!r}; {layout.GROW_HINT}") from exc
        raise
    meta = {
        "version": META_VERSION,
        "key": key,
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "nbytes": int(arr.nbytes),
        "created": time.time(),
        "builder_pid": os.getpid(),
    }
    layout.write_meta(root, key, meta)


def shm_array(
    key: str,
    build_fn: Callable[[], Any] | None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> np.ndarray:
    """A read-only memory map of the array cached under `key`, building it with `build_fn()` if no process has.

    Concurrent callers (ranks on one node, experiments of a grid search) wait for the one builder and then map
    the same pages, so N processes hold the array once. `build_fn=None` only attaches (ShmCacheError if there is
    nothing to attach to). The array must not hold Python objects (dtype=object cannot be memory-mapped).
    """
    layout.check_key(key)
    root = _root(cache_dir)
    if layout.read_meta(root, key) is not None:
        return _map(root, key)
    with layout.key_lock(root, key):
        if layout.read_meta(root, key) is not None:  # another process built it while we waited
            return _map(root, key)
        for stale in layout.stale_tmp_files(root, key):
            stale.unlink(missing_ok=True)  # we hold the lock, so its writer is dead
        if build_fn is None:
            raise ShmCacheError(
                errno.ENOENT,
                f"no cached array {key!r} in {root} (the process that should build it has not, or it was cleared)",
            )
        arr = np.ascontiguousarray(build_fn())
        if arr.dtype.hasobject:
            raise TypeError(
                f"cached array {key!r} has dtype {arr.dtype}, which holds Python objects and cannot be shared; "
                "use fixed-width bytes (dtype='S') or numbers, or dlprobe.fixes.PackedRecords for records"
            )
        _check_room(root, key, arr.nbytes + 4096)  # + the .npy header
        _write(root, key, arr)
    return _map(root, key)
