"""`shm_array(key, build_fn)`: one read-only array in /dev/shm, built once, mapped by every process and run.

Before (every experiment of a grid search, every rank and every spawn worker holds its own copy)::

    features = np.load("features.npy")            # 1 GB per process

After (the first process builds it; every other one, in this run or the next, maps the same pages)::

    from dlprobe.fixes import shm_array
    features = shm_array("features-v1", lambda: np.load("features.npy"))

The builder works under an flock on the key, writes a temporary file and renames it into place, so no process
ever maps a half-written array; a builder killed mid-way leaves a temporary file that the next builder removes.
The key names the data: change it (or `dlprobe cache clear KEY`) when the data changes.

The cache is this user's alone (see dlprobe.fixes.cache_dir): its directory and every file are checked before
use, and an entry is read as numbers and bytes only (the .npy header is parsed without pickle, object arrays are
refused). Packed buffers (PackedRecords, PackedMapping) hold pickled records, so they also carry a signature made
with the user's own key and are mapped only when it matches.
"""

from __future__ import annotations

import errno
import hmac
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dlprobe.fixes import cache_dir as layout
from dlprobe.fixes.cache_dir import ShmCacheError, UnsafeCacheError
from dlprobe.units import format_bytes

META_VERSION = 1

__all__ = ["ShmCacheError", "UnsafeCacheError", "cached_array", "shm_array"]


def _root(cache_dir: str | os.PathLike[str] | None) -> Path:
    root = layout.open_cache_dir(cache_dir, create=True)
    assert root is not None  # made when missing
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


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _map(root: Path, key: str, meta: dict[str, Any], signed: bool) -> np.ndarray:
    """Map the entry's data read-only from a descriptor opened without following links and checked to be this
    user's file; the header is parsed as a literal (never unpickled) and an array of Python objects is refused."""
    path = layout.data_path(root, key)
    hint = f"remove it with `dlprobe cache clear {key}`; the next call rebuilds it"
    with open(path, "rb", opener=layout.entry_opener) as f:
        try:
            read_header = _HEADER_READERS[np.lib.format.read_magic(f)]
            shape, fortran, dtype = read_header(f)
        except (KeyError, ValueError, OSError) as exc:
            raise UnsafeCacheError(f"the cached array {key!r} in {root} is not a readable .npy file ({exc})",
                                   hint) from None  # fmt: skip
        if dtype.hasobject:
            raise UnsafeCacheError(f"the cached array {key!r} in {root} holds Python objects (dtype {dtype}), which "
                                   "dlprobe.fixes never writes nor unpickles", hint)  # fmt: skip
        if int(np.prod(shape)) == 0:  # an empty array has no pages to map
            arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
            arr.flags.writeable = False
        else:
            arr = np.memmap(f, dtype=dtype, mode="r", shape=shape, order="F" if fortran else "C", offset=f.tell())
    if signed:
        _verify(root, key, meta, arr)
    return arr


def _verify(root: Path, key: str, meta: dict[str, Any], arr: np.ndarray) -> None:
    """A packed buffer holds pickles: map it only if the user's own key signed these very bytes under this key."""
    expected = meta.get("mac")
    actual = layout.entry_mac(layout.mac_key(root), key, np.ascontiguousarray(arr).data.cast("B"))
    if not isinstance(expected, str) or not hmac.compare_digest(expected, actual):
        why = "is not signed" if expected is None else "does not match its signature"
        raise UnsafeCacheError(
            f"the cached records {key!r} in {root} {why} with your key, so they were not written by your "
            "dlprobe.fixes (or were changed since); refusing to unpickle them",
            f"remove them with `dlprobe cache clear {key}` (the next run packs them again), or use another key",
        )


def _write(root: Path, key: str, arr: np.ndarray, signed: bool) -> None:
    """Write arr to a private temporary file with plain writes (a full tmpfs then fails with ENOSPC, where a memory
    map would die of SIGBUS), then rename it into place and write the metadata that marks the entry complete."""
    tmp = layout.tmp_path(root, key, os.getpid())
    try:
        with os.fdopen(layout.create_private(tmp), "wb") as f:
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
    if signed:
        meta["mac"] = layout.entry_mac(layout.mac_key(root), key, arr.data.cast("B"))
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
    The cache is this user's own: a directory or entry another user could have written raises UnsafeCacheError.
    """
    return cached_array(key, build_fn, cache_dir=cache_dir)


def cached_array(
    key: str,
    build_fn: Callable[[], Any] | None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    signed: bool = False,
) -> np.ndarray:
    """shm_array, and with `signed` the entry carries an HMAC of its bytes made with the user's key, checked on every
    attach (for buffers of pickled records: a buffer the user's own dlprobe.fixes did not write is never mapped)."""
    layout.check_key(key)
    root = _root(cache_dir)
    meta = layout.read_meta(root, key)
    if meta is not None:
        return _map(root, key, meta, signed)
    with layout.key_lock(root, key):
        meta = layout.read_meta(root, key)
        if meta is not None:  # another process built it while we waited
            return _map(root, key, meta, signed)
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
        _write(root, key, arr, signed)
        meta = layout.read_meta(root, key)
        if meta is None:
            raise ShmCacheError(errno.ENOENT, f"the cached array {key!r} in {root} vanished right after it was written")
    return _map(root, key, meta, signed)
