"""The /dev/shm array cache's directory: where entries live, their metadata, who maps them; no numpy here.

Trust: the cache is read back by the user's training (often as root), and a packed buffer holds pickled records,
so nothing in it may come from another user. The default directory is the user's own (`dlprobe-cache-<uid>`, mode
0700), and every use checks the directory (a real directory, not a link, owned by this uid, not writable by
group or other) and every file it opens (opened without following links, a regular file owned by this uid, not
writable by group or other). Anything else is refused with an UnsafeCacheError, never used and never replaced
silently by another location.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlprobe.errors import DlprobeError

CACHE_DIR_ENV = "DLPROBE_CACHE_DIR"  # overrides the cache directory (tests, or a tmpfs other than /dev/shm)
DEFAULT_CACHE_PARENT = "/dev/shm"
MAC_KEY_NAME = ".mac-key"  # the user's secret that signs packed buffers (they hold pickles); never an entry
MAC_KEY_BYTES = 32
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
DATA_SUFFIX = ".npy"
META_SUFFIX = ".json"
LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
GROW_HINT = (
    "grow it with `mount -o remount,size=8G /dev/shm` (as root), or start the container with `--shm-size=8g` "
    "(Docker; Kubernetes: an emptyDir with medium: Memory), or point DLPROBE_CACHE_DIR at a larger tmpfs"
)


class ShmCacheError(OSError):
    """/dev/shm (or $DLPROBE_CACHE_DIR) is missing, too small, or the key has no entry to attach to."""


class UnsafeCacheError(DlprobeError):
    """The cache directory or one of its files could have been written by another user: refused, never read.

    Raised inside the user's training, where no CLI prints the hint: str() gives the message and the hint."""

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


def default_cache_dir() -> Path:
    """This user's own cache directory in /dev/shm: one per uid, so no user ever reads another's entries."""
    return Path(DEFAULT_CACHE_PARENT) / f"dlprobe-cache-{os.geteuid()}"


def cache_dir() -> Path:
    """The cache directory (unchecked; see open_cache_dir): $DLPROBE_CACHE_DIR, else /dev/shm/dlprobe-cache-<uid>."""
    return Path(os.environ.get(CACHE_DIR_ENV) or default_cache_dir())


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _refuse(what: str, why: str, hint: str) -> UnsafeCacheError:
    return UnsafeCacheError(f"refusing to use the dlprobe.fixes cache {what}: {why}", hint)


def check_dir(root: Path, is_default: bool) -> None:
    """Refuse a cache directory that another user could have filled or could fill (see the module's docstring)."""
    st = os.lstat(root)
    elsewhere = f"set {CACHE_DIR_ENV} to a directory only you can write (`mkdir -m 700 DIR`)"
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(f"directory {root}", "it is a symbolic link", f"remove the link, or {elsewhere}")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(f"directory {root}", "it is not a directory", f"remove it, or {elsewhere}")
    if st.st_uid != os.geteuid():
        raise _refuse(
            f"directory {root}",
            f"it belongs to {_owner_name(st.st_uid)}, not to you ({_owner_name(os.geteuid())}), so its entries could "
            "be anything that user put there",
            f"do not use its contents; have it removed (as root: `rm -rf {root}`), or {elsewhere}",
        )
    private = 0o077 if is_default else 0o022  # the default is private; a directory you chose may be readable
    if st.st_mode & private:
        others = "read or written" if is_default else "written"
        raise _refuse(
            f"directory {root}",
            f"its mode {stat.S_IMODE(st.st_mode):04o} lets group or other users in (it may only be {others} by you)",
            f"`chmod {'700' if is_default else 'go-w'} {root}` after checking that its entries are yours, or remove it",
        )


def open_cache_dir(explicit: str | os.PathLike[str] | None = None, create: bool = True) -> Path | None:
    """The cache directory, made (mode 0700) if missing and `create`, checked on every call; None when it does not
    exist and not `create`. `explicit` (a cache_dir= argument) and $DLPROBE_CACHE_DIR get the same owner and
    write checks as the default; the default is also refused when group or other may read it."""
    given = explicit if explicit is not None else os.environ.get(CACHE_DIR_ENV)
    root = Path(given) if given else default_cache_dir()
    if create:
        if not root.parent.is_dir():
            raise ShmCacheError(
                errno.ENOENT,
                f"{root.parent} does not exist, so the array cache has nowhere to live; mount a tmpfs there "
                f"(`mount -t tmpfs -o size=8G tmpfs {root.parent}`) or set {CACHE_DIR_ENV} to a directory on one",
            )
        with contextlib.suppress(FileExistsError):
            os.mkdir(root, 0o700)  # only ever narrowed by the umask
    try:
        check_dir(root, is_default=not given)
    except FileNotFoundError:
        if create:
            raise
        return None
    return root


def _check_file(path: Path, fd: int, extra_mode: int = 0) -> os.stat_result:
    st = os.fstat(fd)
    where = f"entry {path}"
    if path.name == MAC_KEY_NAME:
        hint = f"remove it (`rm {path}`) and the entries it signed (`dlprobe cache clear`)"
    else:
        key = _key_of(path)
        hint = f"remove it (`dlprobe cache clear {key}`, or `rm {path}`); dlprobe.fixes rebuilds what it needs"
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(where, "it is not a regular file", hint)
    if st.st_uid != os.geteuid():
        raise _refuse(where, f"it belongs to {_owner_name(st.st_uid)}, not to you; it was put there by someone else",
                      hint)  # fmt: skip
    if st.st_mode & (0o022 | extra_mode):
        access = "read or change" if extra_mode & 0o044 else "change"
        raise _refuse(where, f"its mode {stat.S_IMODE(st.st_mode):04o} lets group or other users {access} it", hint)
    return st


def _key_of(path: Path) -> str:
    return path.name.removeprefix(".").split(".")[0] or path.name


def open_entry(path: Path, extra_mode: int = 0) -> int:
    """A read-only descriptor of one of the cache's files, opened without following a link and checked: a regular
    file of this uid that group and other cannot write (nor `extra_mode`). FileNotFoundError when missing."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a planted FIFO must not block the open
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(f"entry {path}", "it is a symbolic link",
                          f"remove it (`rm {path}`); dlprobe.fixes rebuilds what it needs") from None  # fmt: skip
        raise
    try:
        _check_file(path, fd, extra_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def entry_opener(path: str, _flags: int) -> int:
    """For open(path, "rb", opener=entry_opener): a checked entry as a file object that keeps its path as name."""
    return open_entry(Path(path))


def create_private(path: Path) -> int:
    """A new file only this user can read or write, created exclusively and without following a link (a builder's
    temporary file: it is renamed into place once complete)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def mac_key(root: Path) -> bytes:
    """The user's secret that signs packed buffers, made on first use (private to the user, in the 0700 cache
    directory); a buffer whose signature does not match is never unpickled."""
    path = root / MAC_KEY_NAME
    for _ in range(2):
        try:
            fd = open_entry(path, extra_mode=0o077)
        except FileNotFoundError:
            tmp = root / f"{MAC_KEY_NAME}.{os.getpid()}{TMP_SUFFIX}"
            tmp.unlink(missing_ok=True)
            fd = create_private(tmp)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(os.urandom(MAC_KEY_BYTES))
                with contextlib.suppress(FileExistsError):  # another process made it first: theirs is used
                    os.link(tmp, path)  # appears complete or not at all, and never replaces one
            finally:
                tmp.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "rb") as f:
            key = f.read(MAC_KEY_BYTES + 1)
        if len(key) == MAC_KEY_BYTES:
            return key
        raise _refuse(f"key {path}", f"it holds {len(key)} bytes, not {MAC_KEY_BYTES}",
                      f"remove it (`rm {path}`) and the entries it signed (`dlprobe cache clear`)")  # fmt: skip
    raise ShmCacheError(errno.ENOENT, f"could not create the cache's key {path}")


def entry_mac(key: bytes, cache_key: str, data: bytes | memoryview) -> str:
    """The signature of an entry's bytes, bound to its cache key (an entry renamed to another key does not match)."""
    mac = hmac.new(key, cache_key.encode() + b"\0", hashlib.sha256)
    mac.update(data)
    return mac.hexdigest()


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
    fd = os.open(lock_path(root, key), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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
    """The entry's metadata, or None when the key has no complete entry (the metadata is written last).
    UnsafeCacheError when the metadata is not this user's own file (see open_entry)."""
    try:
        with open(meta_path(root, key), "rb", opener=entry_opener) as f:
            meta = json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None
    return meta if isinstance(meta, dict) and os.path.lexists(data_path(root, key)) else None


def write_meta(root: Path, key: str, meta: dict[str, Any]) -> None:
    """Write the metadata atomically (private temporary file, then rename), so a reader never sees half of it."""
    tmp = root / f".{key}.{os.getpid()}.meta{TMP_SUFFIX}"
    fd = create_private(tmp)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(meta, indent=1) + "\n")
        os.replace(tmp, meta_path(root, key))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    problem: str | None = None  # why the entry is refused (another user's file, a link): remove it, never use it

    @property
    def age_s(self) -> float:
        return max(0.0, time.time() - self.created)


def entries(root: Path | None = None) -> list[Entry]:
    """Every complete entry in the cache directory, sorted by key, with the processes that map it. An entry whose
    metadata is not this user's own file is listed with its `problem` (so that it can be removed), not read."""
    if root is None:
        root = open_cache_dir(create=False)
        if root is None:
            return []
    try:
        names = sorted(p.name for p in root.iterdir() if p.name.endswith(META_SUFFIX) and not p.name.startswith("."))
    except FileNotFoundError:
        return []
    metas: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    for name in names:
        key = name.removesuffix(META_SUFFIX)
        try:
            meta = read_meta(root, key)
        except UnsafeCacheError as exc:
            problems[key] = exc.message
            continue
        if meta is not None:
            metas[key] = meta
    pids = mapping_pids([data_path(root, key) for key in metas])
    found = [
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
    found += [Entry(key, 0, "?", [], 0.0, None, [], problem) for key, problem in problems.items()]
    return sorted(found, key=lambda e: e.key)


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
