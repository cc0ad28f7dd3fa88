"""What a loader's dataset hands its forked workers: the open descriptors (files, sockets) that objects reachable from
the dataset hold, found by the descriptor itself, whatever the object's class.

Read in the training process just before the workers fork: /proc/self/fd (a readlink and an fdinfo read each, at
most MAX_FDS), then a bounded walk of the dataset's attributes (MAX_OBJECTS objects, MAX_DEPTH levels). An object
holds a descriptor when its `fileno()` returns it (files, sockets, most wrappers), or when a name it gives of itself
(`filename`, `name`, `path`: an h5py File opened on a Python file object, an LMDB environment's directory) names the
descriptor's file. Every forked worker inherits the same open file description: one offset, one lock table, one
library state for all of them.

A socket often sits deeper than the walk goes: a `requests.Session` keeps its pooled connection eleven levels down
(`.adapters['https://'].poolmanager.pools._container[key].pool.queue[9].sock`). A socket descriptor no object claimed
is looked for again under each of the dataset's own attributes (DEEP_DEPTH levels, DEEP_OBJECTS objects), and is named
by that attribute (`self.session`, its class) with the path to the socket beside it (`via`): the object the user
opened is the one to open per worker, not urllib3's connection inside it."""

from __future__ import annotations

import collections
import os
import re
import stat
import sys
import types
from typing import Any

from dlprobe.rundir.schema import RUN_DIR_ENV

MAX_FDS = 1024
MAX_OBJECTS = 500
MAX_DEPTH = 4
MAX_ITEMS = 16  # items of a container looked into: handles sit in attributes, rarely deep in a big list
MAX_HANDLES = 16
DEEP_DEPTH = 16  # levels under one of the dataset's attributes, for a socket no shallower object claimed
DEEP_OBJECTS = 3000  # objects looked at by that search, all attributes together
MAX_MAPPED = 16
MAPS_LINES_MAX = 20000  # /proc/self/maps lines read at most (a process has a few hundred to a few thousand)
# Mapped files that are code or the system's, not data: shared libraries, Python's own files, the locale archive.
_LIBRARY_MAP = re.compile(r"\.so(\.[\d.]+)?$|\.so\.|/python\d[\d.]*$|/locale/|locale-archive$|\.pyc$|/ld\.so\.cache$")
NAME_ATTRIBUTES = ("filename", "name", "path", "_path", "file", "uri", "url", "database")
_SKIP_PREFIXES = ("/dev/", "/proc/", "/sys/")
_ACCESS = {os.O_RDONLY: "r", os.O_WRONLY: "w", os.O_RDWR: "rw"}


def _open_descriptors() -> dict[int, dict[str, Any]]:
    """This process's descriptors that a dataset may share by mistake: regular files and sockets, never stdio, the
    kernel's (/dev, /proc, /sys), pipes, or the probe's own run directory."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    found: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names[:MAX_FDS]:
        fd = int(name)
        if fd <= 2:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            mode = os.fstat(fd).st_mode
        except OSError:  # noqa: S112 - closed since the listing (the listing's own descriptor among them)
            continue
        socket = target.startswith("socket:")
        if not socket and not (stat.S_ISREG(mode) and target.startswith("/")):
            continue
        if target.startswith(_SKIP_PREFIXES) or (run_dir and target.startswith(os.path.join(run_dir, ""))):
            continue
        entry: dict[str, Any] = {"fd": fd, "target": target, "kind": "socket" if socket else "file"}
        entry.update(_fdinfo(fd))
        found[fd] = entry
    return found


def _fdinfo(fd: int) -> dict[str, Any]:
    """The descriptor's offset and access mode from /proc/self/fdinfo (the offset all workers will share)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            lines = dict(line.split(":", 1) for line in f if ":" in line)
        flags = int(lines["flags"].strip(), 8)
        return {"pos": int(lines["pos"].strip()), "access": _ACCESS.get(flags & os.O_ACCMODE, "?")}
    except (OSError, KeyError, ValueError):
        return {}


def _system_prefixes() -> tuple[str, ...]:
    """Where the system's and Python's own files live: their mappings are not the dataset's data."""
    own = {os.path.join(p, "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p}
    return (*_SKIP_PREFIXES, "/usr/lib/", "/lib/", "/lib64/", "/usr/lib64/", "/usr/share/", *sorted(own))


def _mapped_files() -> dict[str, dict[str, Any]]:
    """Data files mapped into this process (np.memmap, Arrow's memory-mapped tables, mmap.mmap on a file): every
    file-backed mapping of /proc/self/maps but libraries, Python's own files, the kernel's and the run directory."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    found: dict[str, dict[str, Any]] = {}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            lines = [line for _, line in zip(range(MAPS_LINES_MAX), f, strict=False)]
    except OSError:
        return found
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].rstrip("\n")
        if path.endswith(" (deleted)") or _LIBRARY_MAP.search(path) or path.startswith(_system_prefixes()):
            continue
        if run_dir and path.startswith(os.path.join(run_dir, "")):
            continue
        try:
            start, end = (int(x, 16) for x in parts[0].split("-"))
        except ValueError:  # noqa: S112 - a line of another shape maps nothing we can size
            continue
        perms = parts[1]
        entry = found.setdefault(path, {"path": path, "kib": 0, "shared": False, "writable": False})
        entry["kib"] += (end - start) // 1024
        entry["shared"] = entry["shared"] or perms[3:4] == "s"
        entry["writable"] = entry["writable"] or perms[1:2] == "w"
    return found


def _is_leaf(obj: Any) -> bool:
    # a module is the program's, not an object the dataset opened: its globals are not walked (nor a socket in them
    # named the dataset's)
    if isinstance(obj, (str, bytes, bytearray, int, float, bool, complex, type(None), type, types.ModuleType)):
        return True
    if callable(obj) and not _declared(obj, "fileno"):  # functions, methods, transforms: no handle of their own
        return True
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    return bool(
        (np is not None and isinstance(obj, np.ndarray)) or (torch is not None and isinstance(obj, torch.Tensor))
    )


def _children(obj: Any) -> list[tuple[str, Any]]:
    """(the path suffix, the value) of what obj holds: its attributes, a container's first items."""
    if isinstance(obj, dict):
        return [(f"[{_key(k)}]", v) for k, v in list(obj.items())[:MAX_ITEMS]]
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        return [(f"[{i}]", v) for i, v in enumerate(list(obj)[:MAX_ITEMS])]
    try:
        attrs = vars(obj)
    except TypeError:
        return []
    return [(f".{k}", v) for k, v in list(attrs.items())[:64] if isinstance(k, str)]


def _key(key: Any) -> str:
    """A dict key as a path shows it: short keys as Python writes them, a long one (urllib3's PoolKey) cut."""
    text = repr(key)
    return text if len(text) <= 40 else f"{type(key).__name__}(...)"


def _declared(obj: Any, attr: str) -> bool:
    """The attribute is the object's own or its class's: never one a `__getattr__` makes up (a proxy or an RPC client
    would run a remote call for it)."""
    own = getattr(obj, "__dict__", None)
    return (isinstance(own, dict) and attr in own) or any(attr in vars(cls) for cls in type(obj).__mro__)


def _fileno(obj: Any) -> int | None:
    if not _declared(obj, "fileno"):
        return None
    method = getattr(obj, "fileno", None)
    if not callable(method):
        return None
    try:
        fd = method()
    except Exception:  # closed, or not backed by a descriptor (io.BytesIO): holds none
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _names(obj: Any) -> list[str]:
    """What the object calls itself: its file name or path, where it says one (a C object's method `path()` too)."""
    names = []
    for attr in NAME_ATTRIBUTES:
        if not _declared(obj, attr):
            continue
        try:
            value = getattr(obj, attr, None)
            if callable(value) and type(value).__name__ == "builtin_function_or_method":
                value = value()  # lmdb.Environment.path(): a C accessor, no side effect
        except Exception:  # noqa: S112 - a property that raises (a closed file) names nothing
            continue
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, str) and len(value) > 1:
            names.append(value)
    return names


def _names_target(names: list[str], target: str) -> bool:
    """A name the object gives matches the descriptor's file: the same path, the folder holding it (an LMDB
    environment's data.mdb and lock.mdb), or the path inside a description ("<_io.BufferedReader name='/d/x.h5'>")."""
    return any(
        n == target or target.startswith(n.rstrip("/") + "/") or (n.startswith("<") and target in n) for n in names
    )


def owner_of(obj: Any) -> str:
    """The library and class of an object: 'h5py._hl.files.File'; a C type that calls its module 'builtins'
    (lmdb.Environment) is found in the module that exports it."""
    cls = type(obj)
    module = cls.__module__
    if module == "builtins":
        exporters = [name for name, mod in list(sys.modules.items())
                     if mod is not None and getattr(mod, cls.__name__, None) is cls]  # fmt: skip
        module = min(exporters, key=len) if exporters else module
    return f"{module}.{cls.__qualname__}"


def dataset_handles(dataset: Any) -> dict[str, Any]:
    """{"fds": open descriptors in all, "handles": [{fd, target, kind, pos, access, attribute, owner}]}: the files and
    sockets that objects reachable from the dataset hold, the library's object first where a file object and the
    library's both hold one."""
    descriptors = _open_descriptors()
    mapped = _mapped_files()
    handles: list[dict[str, Any]] = []
    named_paths: list[tuple[str, str, Any, str]] = []  # (a path string the dataset holds, where, its holder's, where)
    threads: list[tuple[str, str]] = []  # (where, name) of live threads the dataset's objects hold: a pool's workers
    tops: dict[str, Any] = {}  # the dataset's own attributes, by path: the owner a thread found under one is named by
    # Always walked (bounded): a pool's threads need no descriptor to be found.
    seen: set[int] = set()
    queue: list[tuple[str, Any, int, Any, str]] = [("self", dataset, 0, None, "")]
    while queue and len(seen) < MAX_OBJECTS:
        path, obj, depth, parent, parent_path = queue.pop(0)
        if isinstance(obj, str) and obj.startswith("/") and parent is not None:
            named_paths.append((obj, path, parent, parent_path))
        if _is_memmap(obj) and isinstance(getattr(obj, "filename", None), (str, os.PathLike)):
            _claim_mapping(mapped, os.fspath(obj.filename), path, obj)
        if id(obj) in seen or _is_leaf(obj):
            continue
        seen.add(id(obj))
        if depth == 1:
            tops[path] = obj
        if _is_live_thread(obj):
            threads.append((path, str(getattr(obj, "name", "?"))))
            continue
        if depth > 0:
            held = _held(obj, descriptors)
            how = "fileno" if _fileno(obj) is not None else "name"
            handles.extend({**descriptors[fd], "attribute": path, "owner": owner_of(obj), "held_by": how}
                           for fd in held)  # fmt: skip
            for name in _names(obj):
                _claim_mapping(mapped, name, path, obj)
        if depth < MAX_DEPTH:
            queue.extend((path + suffix, child, depth + 1, obj, path) for suffix, child in _children(obj))
    handles = [h for h in handles if not _inside_another(h, handles)]
    handles.extend(_unclaimed(descriptors, handles, named_paths))
    handles.extend(_deep_sockets(descriptors, handles, tops))
    handles.sort(key=lambda h: (h["owner"].startswith(("_io.", "io.")), h["fd"]))
    try:
        total = len(os.listdir("/proc/self/fd"))
    except OSError:
        total = None
    shown = sorted(mapped.values(), key=lambda m: ("attribute" not in m, -m["kib"]))[:MAX_MAPPED]
    return {"fds": total, "handles": handles[:MAX_HANDLES], "mapped": shown, "pools": _pools(threads, tops)}


def _is_live_thread(obj: Any) -> bool:
    threading = sys.modules.get("threading")
    return threading is not None and isinstance(obj, threading.Thread) and obj.is_alive()


def _pools(threads: list[tuple[str, str]], tops: dict[str, Any]) -> list[dict[str, Any]]:
    """The dataset's attributes that hold live threads (a ThreadPoolExecutor's workers, a prefetcher's thread): a
    forked worker inherits the object but none of its threads, so work handed to them there never runs."""
    grouped: dict[str, list[str]] = {}
    for where, name in threads:
        top = re.match(r"self(\.[A-Za-z_]\w*|\[[^\]]*\])", where)
        grouped.setdefault(top.group(0) if top else where, []).append(name)
    pools = []
    for attribute, names in list(grouped.items())[:MAX_HANDLES]:
        owner = owner_of(tops[attribute]) if attribute in tops else "threading.Thread"
        pools.append({"attribute": attribute, "owner": owner, "threads": names[:8], "count": len(names)})
    return pools


def _is_memmap(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.memmap)


def _claim_mapping(mapped: dict[str, dict[str, Any]], name: str, attribute: str, obj: Any) -> None:
    """The object names a mapped file: it holds that mapping (the first, shortest path to it wins)."""
    entry = (mapped.get(name) or mapped.get(os.path.realpath(name))) if name.startswith("/") else None
    if entry is not None and "attribute" not in entry:
        entry.update({"attribute": attribute, "owner": owner_of(obj)})


def _unclaimed(
    descriptors: dict[int, dict[str, Any]], handles: list[dict[str, Any]], named_paths: list[tuple[str, str, Any, str]]
) -> list[dict[str, Any]]:
    """Descriptors to a file the dataset names by path, that no object claims by fileno() or a name (a sqlite3
    connection, a C library's handle): held by the library objects beside that path, on the same holder."""
    claimed = {h["fd"] for h in handles}
    out: list[dict[str, Any]] = []
    for fd, d in descriptors.items():
        if fd in claimed or d["kind"] != "file":
            continue
        for value, _where, holder, holder_path in named_paths:
            if value != d["target"]:  # the very file: a folder the dataset names holds many a file of others'
                continue
            # A descriptor the process opened for itself, beside a dataset that only names the file, is not the
            # dataset's: only a library object beside the path may hold it.
            siblings = [(f"{holder_path}{k}", v) for k, v in _children(holder) if _library_object(v)]
            out.extend({**d, "attribute": attribute, "owner": owner_of(obj), "held_by": "path"}
                       for attribute, obj in siblings)  # fmt: skip
            if siblings:
                break
    return out


_CONTAINERS = (dict, list, tuple, set, frozenset, collections.deque)


def _deep_sockets(
    descriptors: dict[int, dict[str, Any]], handles: list[dict[str, Any]], tops: dict[str, Any]
) -> list[dict[str, Any]]:
    """Sockets no object of the walk claimed, found deeper under one of the dataset's attributes (a session's pooled
    connection): each named by the first object on the way that is not a container (`self.session`, or
    `self.clients['eu']` in a dict of sessions) and its class, the path to the socket in `via`."""
    claimed = {h["fd"] for h in handles}
    wanted = {fd for fd, d in descriptors.items() if d["kind"] == "socket" and fd not in claimed}
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for attribute, top in tops.items():
        queue: collections.deque[tuple[str, Any, int, str, Any]] = collections.deque([(attribute, top, 0, attribute,
                                                                                       top)])  # fmt: skip
        while queue and wanted and len(seen) < DEEP_OBJECTS:
            path, obj, depth, holder_path, holder = queue.popleft()
            if id(obj) in seen or _is_leaf(obj):
                continue
            seen.add(id(obj))
            if isinstance(holder, _CONTAINERS) and not isinstance(obj, _CONTAINERS):
                holder_path, holder = path, obj  # the object the user put in the container
            fd = _fileno(obj)
            if fd is not None:
                if fd in wanted:
                    wanted.discard(fd)
                    out.append({**descriptors[fd], "attribute": holder_path, "owner": owner_of(holder),
                                "held_by": "fileno", "via": path, "via_owner": owner_of(obj)})  # fmt: skip
                continue  # a socket holds no other object's descriptor
            if depth < DEEP_DEPTH:
                queue.extend((path + suffix, child, depth + 1, holder_path, holder) for suffix, child in _children(obj))
    return out


def _library_object(obj: Any) -> bool:
    """An opaque object of a library's own, implemented in C (no `__dict__`: sqlite3.Connection, a database client's
    handle), that may hold a descriptor out of sight: not data, not a container, not a function."""
    plain = (str, bytes, bytearray, int, float, bool, complex, type(None), type, dict, list, tuple, set, frozenset,
             types.FunctionType, types.MethodType, types.BuiltinFunctionType)  # fmt: skip
    if isinstance(obj, plain):
        return False
    if isinstance(getattr(obj, "__dict__", None), dict):  # a Python object is walked into, its handles found there
        return False
    module = type(obj).__module__.split(".", 1)[0]
    return module not in ("builtins", "_io", "io", "torch", "numpy", "pathlib", "collections", "__main__")


def _inside_another(handle: dict[str, Any], handles: list[dict[str, Any]]) -> bool:
    """The handle is the same descriptor held by a part of an object already named (self.h5._id inside self.h5)."""
    attr = handle["attribute"]
    return any(
        h["fd"] == handle["fd"] and attr.startswith((h["attribute"] + ".", h["attribute"] + "[")) for h in handles
    )


def _held(obj: Any, descriptors: dict[int, dict[str, Any]]) -> list[int]:
    fd = _fileno(obj)
    if fd is not None:
        return [fd] if fd in descriptors else []
    names = _names(obj)
    return [fd for fd, d in descriptors.items() if d["kind"] == "file" and names and _names_target(names, d["target"])]
