"""What a loader's dataset hands its forked workers: the open descriptors (files, sockets) that objects reachable from
the dataset hold, found by the descriptor itself, whatever the object's class.

Read in the training process just before the workers fork: /proc/self/fd (a readlink and an fdinfo read each, at
most MAX_FDS), then a bounded walk of the dataset's attributes (MAX_OBJECTS objects, MAX_DEPTH levels). An object
holds a descriptor when its `fileno()` returns it (files, sockets, most wrappers), or when a name it gives of itself
(`filename`, `name`, `path`: an h5py File opened on a Python file object, an LMDB environment's directory) names the
descriptor's file. Every forked worker inherits the same open file description: one offset, one lock table, one
library state for all of them."""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

from dlprobe.rundir.schema import RUN_DIR_ENV

MAX_FDS = 1024
MAX_OBJECTS = 500
MAX_DEPTH = 4
MAX_ITEMS = 16  # items of a container looked into: handles sit in attributes, rarely deep in a big list
MAX_HANDLES = 16
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


def _is_leaf(obj: Any) -> bool:
    if isinstance(obj, (str, bytes, bytearray, int, float, bool, complex, type(None), type)):
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
        return [(f"[{k!r}]", v) for k, v in list(obj.items())[:MAX_ITEMS]]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [(f"[{i}]", v) for i, v in enumerate(list(obj)[:MAX_ITEMS])]
    try:
        attrs = vars(obj)
    except TypeError:
        return []
    return [(f".{k}", v) for k, v in list(attrs.items())[:64] if isinstance(k, str)]


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
    handles: list[dict[str, Any]] = []
    if descriptors:
        seen: set[int] = set()
        queue: list[tuple[str, Any, int]] = [("self", dataset, 0)]
        while queue and len(seen) < MAX_OBJECTS:
            path, obj, depth = queue.pop(0)
            if id(obj) in seen or _is_leaf(obj):
                continue
            seen.add(id(obj))
            if depth > 0:
                held = _held(obj, descriptors)
                handles.extend({**descriptors[fd], "attribute": path, "owner": owner_of(obj)} for fd in held)
            if depth < MAX_DEPTH:
                queue.extend((path + suffix, child, depth + 1) for suffix, child in _children(obj))
    handles = [h for h in handles if not _inside_another(h, handles)]
    handles.sort(key=lambda h: (h["owner"].startswith(("_io.", "io.")), h["fd"]))
    try:
        total = len(os.listdir("/proc/self/fd"))
    except OSError:
        total = None
    return {"fds": total, "handles": handles[:MAX_HANDLES]}


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
