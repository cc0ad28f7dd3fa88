"""The /dev/shm array cache's directory: where entries live, their metadata, who maps them; no numpy here."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "DLPROBE_CACHE_DIR"  # overrides the cache directory (tests, or a tmpfs other than /dev/shm)
DEFAULT_CACHE_DIR = "/dev/shm/dlprobe-cache"
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
DATA_SUFFIX = ".npy"
META_SUFFIX = ".json"
LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
GROW_HINT = (
    "grow it with `mount -o remount,size=8G /dev/shm` (as root), or start the container with `--shm-size=8g` "
    "(Docker; Kubernetes: an emptyDir with medium: Memory), or point DLPROBE_CACHE_DIR at a larger tmpfs"
)


def cache_dir() -> Path:
    """The cache directory: $DLPROBE_CACHE_DIR, else /dev/shm/dlprobe-cache."""
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR)


def check_key(key: str) -> str:
    """Return the key, or raise ValueError naming it: keys become file names, so no slashes or dots first."""
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise ValueError(
            f"cache key {key!r} is not valid: use 1-200 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit (no '/'), e.g. 'imagenet-train-v1'"
        )
    return key


def data_path(root: Path, key: str) -> Path:
    return root / (key + DATA_SUFFIX)


def meta_path(root: Path, key: str) -> Path:
    return root / (key + META_SUFFIX)


def lock_path(root: Path, key: str) -> Path:
    return root / (key + LOCK_SUFFIX)


def tmp_path(root: Path, key: str, pid: int) -> Path:
    """A builder's private file; hidden and named by its pid so that a later builder can tell it is stale."""
    return root / f".{key}.{pid}{TMP_SUFFIX}"


def stale_tmp_files(root: Path, key: str) -> list[Path]:
    """Temporary files left for `key` by builders that died (only called while holding the key's lock)."""
    pattern = re.compile(rf"\.{re.escape(key)}\.\d+(\.meta)?{re.escape(TMP_SUFFIX)}")
    try:
        return [p for p in root.iterdir() if pattern.fullmatch(p.name)]
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def key_lock(root: Path, key: str, blocking: bool = True) -> Iterator[bool]:
    """Hold the key's exclusive flock (released by the kernel if the holder dies); yields False when
    blocking=False and another process holds it."""
    fd = os.open(lock_path(root, key), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the lock


def read_meta(root: Path, key: str) -> dict[str, Any] | None:
    """The entry's metadata, or None when the key has no complete entry (the metadata is written last)."""
    try:
        meta = json.loads(meta_path(root, key).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return meta if isinstance(meta, dict) and data_path(root, key).exists() else None


def write_meta(root: Path, key: str, meta: dict[str, Any]) -> None:
    """Write the metadata atomically (temporary file, then rename), so a reader never sees half of it."""
    tmp = root / f".{key}.{os.getpid()}.meta{TMP_SUFFIX}"
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp, meta_path(root, key))


def mapping_pids(paths: list[Path]) -> dict[Path, list[int]]:
    """Which processes map each path, from /proc/*/maps (only the processes this user may read)."""
    wanted = {str(p): p for p in paths}
    found: dict[Path, list[int]] = {p: [] for p in paths}
    if not wanted:
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "maps").read_text()
        except OSError:  # noqa: S112 - gone, or another user's process: not ours to read
            continue
        seen = set()
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6:
                name = parts[5].removesuffix(" (deleted)")
                if name in wanted:
                    seen.add(wanted[name])
        for path in seen:
            found[path].append(int(entry.name))
    return found


@dataclass
class Entry:
    """One cached array as `dlprobe cache list` shows it."""

    key: str
    nbytes: int
    dtype: str
    shape: list[int]
    created: float
    builder_pid: int | None
    pids: list[int]

    @property
    def age_s(self) -> float:
        return max(0.0, time.time() - self.created)


def entries(root: Path | None = None) -> list[Entry]:
    """Every complete entry in the cache directory, sorted by key, with the processes that map it."""
    root = root or cache_dir()
    try:
        names = sorted(p.name for p in root.iterdir() if p.name.endswith(META_SUFFIX) and not p.name.startswith("."))
    except FileNotFoundError:
        return []
    metas = {}
    for name in names:
        key = name.removesuffix(META_SUFFIX)
        meta = read_meta(root, key)
        if meta is not None:
            metas[key] = meta
    pids = mapping_pids([data_path(root, key) for key in metas])
    return [
        Entry(
            key=key,
            nbytes=int(meta.get("nbytes") or 0),
            dtype=str(meta.get("dtype") or "?"),
            shape=list(meta.get("shape") or []),
            created=float(meta.get("created") or 0.0),
            builder_pid=meta.get("builder_pid"),
            pids=sorted(pids[data_path(root, key)]),
        )
        for key, meta in metas.items()
    ]


def remove(root: Path, key: str) -> bool:
    """Remove one entry's files (metadata first, so no reader takes a half-removed entry for a complete one).
    Returns False when a builder holds the key's lock right now. Processes that map the array keep their pages
    until they exit."""
    with key_lock(root, key, blocking=False) as held:
        if not held:
            return False
        for path in (meta_path(root, key), data_path(root, key), *stale_tmp_files(root, key)):
            path.unlink(missing_ok=True)
        lock_path(root, key).unlink(missing_ok=True)
    return True
