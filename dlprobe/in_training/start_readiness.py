"""What the other start methods would make of a loader, read once in the training process before its workers start.

Under fork the workers inherit the parent's memory; under forkserver (Python 3.14's default on Linux) and spawn each
worker is handed a pickled copy of what torch passes it (the dataset, collate_fn and worker_init_fn: the sampler
stays in the main process) and imports `__main__` again. So, for the loader's first iterator:

- each of those objects is pickled into a counting sink (nothing is kept, nothing written anywhere), bounded in time
  and in bytes written. Protocol 5 hands large buffers (numpy arrays, memory maps) over out of band: they are counted
  by their length, never copied or read. torch's own reductions are not used: under them a tensor's storage moves to
  shared memory, a change to the training's tensors. A class that defines `__reduce__`, `__reduce_ex__` or
  `__getstate__` is never called unless it is the standard library's or numpy's, pandas', torch's, Pillow's or
  h5py's (the script's own, or another library's, may close a handle, drop a cache, write a file): the object is
  named as not checked (`not_run`), and what it holds is neither pickled nor judged;
- an object that does not pickle is searched for the attribute that fails (each child pickled alone, bounded), and
  named with the reason (a lambda, a local function or class, an open handle, a lock, a thread);
- the copy each worker would rebuild is estimated in memory (objects deduplicated as pickle's memo does, big
  containers sampled), not as pickled bytes: a list of dicts takes several times its pickle in a worker;
- whether `__main__` iterates the loader outside an `if __name__ == "__main__":` block (every forkserver or spawn
  worker would run it again and fail in "the bootstrapping phase"), and the script's top-level time before the
  loader, split into imports and other work, from the start-up profile (in_training/startup_profile.py).
"""

from __future__ import annotations

import ast
import os
import pickle
import sys
import time
from typing import Any

from dlprobe.in_training import quiet_fork
from dlprobe.in_training.fork_handles import owner_of
from dlprobe.in_training.pickle_walk import deepest_refusal

MAX_PICKLE_S = 2.0  # pickling all of a loader's objects stops past this (in the detached copy)
EXTRA_S = 0.25  # what collate_fn and worker_init_fn get past the bound, so a slow dataset leaves them judged
# The whole check runs in a forked copy of the training process (in_training/isolated.py); past this it is stopped
CHILD_TIMEOUT_S = 6.0
MAX_PICKLE_BYTES = 512 * 1024 * 1024  # in-band bytes written to the counting sink before it stops
STAND_IN_BYTES = 1024 * 1024  # numpy arrays larger than this are counted by length, not pickled
MAX_SEARCH_PICKLES = 200  # children pickled alone while looking for the attribute that fails
MAX_CHILDREN = 64
SAMPLE_ITEMS = 200  # items of a big container sized one by one; the rest are scaled from them
MAX_SIZE_DEPTH = 12
MAX_SIZE_OBJECTS = 200_000
PYMALLOC_ALIGN = 16
MIN_RUNNABLE_S = 0.2  # the runnable time a share of a core is read over, at least
_HANDLE_TYPES = ("BufferedReader", "BufferedWriter", "BufferedRandom", "TextIOWrapper", "FileIO", "socket",
                 "Environment", "Transaction", "Cursor", "File", "Group", "Dataset", "Connection", "mmap")  # fmt: skip
_LOCK_TYPES = ("lock", "RLock", "_RLock", "Condition", "Semaphore", "Event")
# Libraries whose pickling hooks only read the object's state (arrays, frames, images): they run in the copy
_SAFE_REDUCERS = ("numpy", "pandas", "torch", "PIL", "h5py")  # h5py's only raise: its handles do not pickle


class _Bound(Exception):
    """The counting sink or the pickler ran past its time or size bound."""


class _CountingSink:
    """A write-only file that keeps nothing: the pickle's in-band length, and a deadline checked at every write."""

    def __init__(self, deadline: float, limit: int) -> None:
        self.bytes = 0
        self.deadline = deadline
        self.limit = limit

    def write(self, data: Any) -> int:
        n = len(memoryview(data).cast("B")) if not isinstance(data, bytes) else len(data)
        self.bytes += n
        if self.bytes > self.limit:
            raise _Bound(f"over {self.limit // (1024 * 1024)} MiB pickled")
        if time.perf_counter() > self.deadline:
            raise _Bound(f"over {MAX_PICKLE_S:g} s pickling")
        return n


def _reduction_known_safe(cls: type) -> bool:
    """A class whose own pickling hooks dlprobe lets run: the standard library's and those of _SAFE_REDUCERS, which
    only read the object's state. Any other's (the script's, an installed library's) is never called."""
    if cls.__module__.split(".")[0] in _SAFE_REDUCERS:
        return True
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return not path or not quiet_fork.foreign_code(path)  # no file: built into the interpreter


def _custom_pickling(cls: type) -> bool:
    return any(name in vars(c) for c in cls.__mro__[:-1] for name in ("__reduce__", "__reduce_ex__", "__getstate__"))


class _Pickler(pickle.Pickler):
    """Plain pickle (no torch reductions: they move tensors to shared memory), with out-of-band buffers counted and
    the user's own pickling hooks left uncalled."""

    def __init__(self, sink: _CountingSink, state: dict[str, Any]) -> None:
        super().__init__(sink, protocol=5, buffer_callback=self._buffer)
        self.state = state
        self.sink = sink

    def _buffer(self, buf: pickle.PickleBuffer) -> bool:
        self.state["buffer_bytes"] += memoryview(buf).nbytes
        return False  # out of band: counted, never written

    def reducer_override(self, obj: Any) -> Any:
        if time.perf_counter() > self.sink.deadline:
            raise _Bound(f"over {MAX_PICKLE_S:g} s pickling")
        cls = type(obj)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            # torch's ForkingPickler shares a tensor's storage through shared memory: nothing is copied per worker
            self.state["tensors"] += 1
            self.state["tensor_bytes"] += int(obj.element_size() * obj.nelement())
            return (int, ())
        np = sys.modules.get("numpy")
        if np is not None and isinstance(obj, np.ndarray) and obj.dtype != object and obj.nbytes > STAND_IN_BYTES:
            # numpy copies a non-contiguous array into bytes to pickle it: counted by its length, never copied
            self.state["buffer_bytes"] += int(obj.nbytes)
            return (int, ())
        if not isinstance(obj, type) and _custom_pickling(cls) and not _reduction_known_safe(cls):
            # What its own __getstate__ would drop (an LMDB environment, a lock) is not known without calling it, and
            # calling it runs code of the script's or a library's (it may write a file, open a connection): nothing
            # of it is pickled here, and it is named as not checked
            self.state["not_run"].append(f"{cls.__module__}.{cls.__qualname__}")
            return (object, ())
        return NotImplemented


def _pickle(obj: Any, deadline: float, limit: int) -> dict[str, Any]:
    """Pickle obj into the counting sink: {"ok", "bytes" (in-band + out-of-band), "error", "bounded", ...}."""
    state: dict[str, Any] = {"buffer_bytes": 0, "tensors": 0, "tensor_bytes": 0, "not_run": []}
    sink = _CountingSink(deadline, limit)
    try:
        _Pickler(sink, state).dump(obj)
        state["ok"] = True
    except _Bound as exc:
        state.update(ok=None, bounded=str(exc))
    except RecursionError:
        state.update(ok=None, bounded="too deeply nested to pickle here")
    except Exception as exc:  # whatever pickle or the object raises is the news: it would fail in every worker
        state.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    state["bytes"] = sink.bytes + state["buffer_bytes"]
    return state


def _is_function(obj: Any) -> bool:
    return type(obj).__name__ in ("function", "method", "builtin_function_or_method")


def _reason(obj: Any, error: str) -> tuple[str, str]:
    """(kind, sentence) of why obj does not pickle."""
    cls = type(obj)
    name = getattr(obj, "__qualname__", "")
    if type(obj).__name__ == "function" and name.endswith("<lambda>"):
        return "lambda", f"a lambda ({name}): pickle sends functions by name, and a lambda has none"
    if type(obj).__name__ == "function" and "<locals>" in name:
        return "local-function", f"a function defined inside another ({name}): pickle cannot import it by name"
    if "<locals>" in cls.__qualname__:
        return "local-class", f"an instance of a class defined inside a function ({cls.__qualname__})"
    if isinstance(obj, type) and "<locals>" in obj.__qualname__:
        return "local-class", f"a class defined inside a function ({obj.__qualname__})"
    owner = owner_of(obj)  # lmdb.Environment, not the builtins its C type says
    if cls.__name__ == "Thread" or cls.__module__ == "threading" and "Thread" in cls.__name__:
        return "thread", f"a thread ({owner})"
    if cls.__name__ in _LOCK_TYPES or cls.__module__ in ("_thread", "threading"):
        return "lock", f"a lock ({owner})"
    if cls.__name__ in _HANDLE_TYPES or owner.split(".")[0] in ("h5py", "lmdb", "sqlite3", "_io", "io"):
        return "handle", f"an open handle ({owner})"
    if cls.__module__ == "_pickle" or "pickle" in error.lower() and cls is dict:
        return "other", error
    return "other", f"{owner}: {error}"


def _refusal(obj: Any, deadline: float) -> str | None:
    """pickle's error for obj pickled alone into the counting sink, or None (it pickles, or the bound was hit)."""
    result = _pickle(obj, deadline, MAX_PICKLE_BYTES)
    return str(result["error"]) if result.get("ok") is False else None


def check_pickle(name: str, obj: Any, deadline: float) -> dict[str, Any]:
    """One object torch hands each worker: whether it pickles, its pickled length, and if not where and why."""
    entry: dict[str, Any] = {"name": name}
    result = _pickle(obj, deadline, MAX_PICKLE_BYTES)
    entry["picklable"] = result.get("ok")
    entry["pickled_bytes"] = result["bytes"] if result.get("ok") else None
    if result.get("bounded"):
        entry.update(skipped=result["bounded"], pickled_at_least=result["bytes"])
    if result["tensors"]:
        entry.update(tensors=result["tensors"], tensor_bytes=result["tensor_bytes"])
    if result["buffer_bytes"]:
        entry["buffer_bytes"] = result["buffer_bytes"]  # counted by length, not pickled here
    if result["not_run"]:
        entry["not_run"] = sorted(set(result["not_run"]))[:8]
    if result.get("ok") is False:
        path, culprit, error = deepest_refusal(
            "self" if name == "dataset" else name,
            obj,
            str(result["error"]),
            lambda child: _refusal(child, deadline),
            limit=MAX_CHILDREN,
            deadline=deadline,
            budget=MAX_SEARCH_PICKLES,
        )
        kind, why = _reason(culprit, error)
        entry.update(attribute=path, reason=why, kind=kind, error=error)
    return entry


# -- the copy each worker would rebuild, in memory -------------------------------------------------------------------


def _aligned(n: int) -> int:
    return -(-n // PYMALLOC_ALIGN) * PYMALLOC_ALIGN


class _Sizer:
    """Sums the memory of what unpickling obj would rebuild: every object once (pickle's memo keeps shared objects
    shared), ints above 256 and floats once per reference (pickle writes them inline), big containers sampled."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.objects = 0
        self.truncated = False

    def size(self, obj: Any, depth: int = 0) -> int:
        if isinstance(obj, bool) or obj is None:
            return 0
        if isinstance(obj, int):
            return 0 if -5 <= obj <= 256 else _aligned(sys.getsizeof(obj))
        if isinstance(obj, float):
            return _aligned(sys.getsizeof(obj))
        if id(obj) in self.seen:
            return 0
        self.seen.add(id(obj))
        self.objects += 1
        if depth > MAX_SIZE_DEPTH or self.objects > MAX_SIZE_OBJECTS:
            self.truncated = True
            return _aligned(sys.getsizeof(obj))
        np = sys.modules.get("numpy")
        torch = sys.modules.get("torch")
        if np is not None and isinstance(obj, np.ndarray):
            if obj.dtype == object:
                return int(obj.nbytes) + self._items(list(obj.ravel()), depth)
            return int(obj.nbytes) + 112  # a memory map too: unpickled, it is the whole array in memory
        if torch is not None and isinstance(obj, torch.Tensor):
            return 0  # shared memory under torch's reductions (tensor_bytes says how much)
        if isinstance(obj, (str, bytes, bytearray, type)) or _is_function(obj):
            return 0 if isinstance(obj, type) or _is_function(obj) else _aligned(sys.getsizeof(obj))
        if isinstance(obj, dict):
            return _aligned(sys.getsizeof(obj)) + self._items([x for kv in obj.items() for x in kv], depth)
        if isinstance(obj, (list, tuple, set, frozenset)):
            return _aligned(sys.getsizeof(obj)) + self._items(list(obj) if not isinstance(obj, list) else obj, depth)
        pd_kind = _pandas(obj)
        if pd_kind:
            from dlprobe.in_training.dataset_inspect import _deep  # pandas' own buffers, sampled

            return int(_deep(obj)[0])
        own = _aligned(sys.getsizeof(obj))
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            own += self.size(attrs, depth + 1)
        slots = getattr(type(obj), "__slots__", ())
        for slot in [slots] if isinstance(slots, str) else list(slots):
            own += self.size(getattr(obj, slot, None), depth + 1)
        return own

    def _items(self, items: list[Any], depth: int) -> int:
        """All items of a small container; of a big one, a sample, scaled by the median item (the first item carries
        what the others share, such as a dict's keys: the median does not)."""
        if len(items) <= SAMPLE_ITEMS * 2:
            return sum(self.size(v, depth + 1) for v in items)
        step = len(items) // SAMPLE_ITEMS
        sizes = [self.size(v, depth + 1) for v in items[::step][:SAMPLE_ITEMS]]
        ordered = sorted(sizes)
        return sum(sizes) + ordered[len(ordered) // 2] * (len(items) - len(sizes))


def _pandas(obj: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, (pd.DataFrame, pd.Series))


def copy_bytes(objects: list[Any]) -> tuple[int, bool]:
    """(bytes a worker's unpickled copy of these objects takes, whether the walk stopped at its bound)."""
    sizer = _Sizer()
    total = sum(sizer.size(obj) for obj in objects)
    return total, sizer.truncated


# -- __main__: the guard, and the top-level work a forkserver or spawn worker repeats ---------------------------------


def _guard_blocks(path: str) -> list[tuple[int, int]] | None:
    """The line ranges of the module-level `if __name__ == "__main__":` blocks of the script (None: not read)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    blocks = []
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test):
            blocks.append((node.body[0].lineno, node.end_lineno or node.body[-1].lineno))
    return blocks


def _is_main_test(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.comparators) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    strings = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return bool(names and strings and isinstance(test.ops[0], ast.Eq))


def _main_frame_line(main_file: str) -> int | None:
    """The line of `__main__`'s top level that is running now (the loader is iterated under it), else None."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return frame.f_lineno if os.path.realpath(code.co_filename) == main_file else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _inside(line: int, blocks: list[tuple[int, int]]) -> bool:
    return any(a <= line <= b for a, b in blocks)


def main_script() -> dict[str, Any]:
    """Whether the loader is iterated from `__main__`'s top level outside its `if __name__ == "__main__":` guard, and
    the script's top-level time before the loader (from the start-up profile), outside the guard."""
    from dlprobe.in_training import startup_profile

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    out: dict[str, Any] = {"file": None, "guarded": None}
    if not path:
        return out  # an interactive session, `python -c`: there is no file a worker could run again
    main_file = os.path.realpath(path)
    out["file"] = os.path.basename(main_file)
    blocks = _guard_blocks(main_file)
    line = _main_frame_line(main_file)
    out["iter_line"] = line
    if blocks is not None:
        out["guard_lines"] = [list(b) for b in blocks]
        out["guarded"] = None if line is None else _inside(line, blocks)
        if line is None:
            out["guarded"] = True if blocks else None  # iterated from a function called after the top level
    profile = startup_profile.profile_seconds()
    if profile is not None and blocks is not None:
        real_paths: dict[str, str] = {}  # shared by both splits: the same few files in every stack
        wall = _top_level_split(profile, main_file, blocks, real_paths)
        out.update(top_level_imports_s=round(wall["imports"], 3), top_level_work_s=round(wall["work"], 3),
                   guarded_s=round(wall["guarded"], 3), imports_s=round(wall["all_imports"], 3))  # fmt: skip
        cpu_profile = startup_profile.profile_seconds(cpu=True)
        main_cpu = startup_profile.main_thread_cpu_s()
        if cpu_profile and main_cpu is not None:
            guarded_cpu = _top_level_split(cpu_profile, main_file, blocks, real_paths)["guarded"]
            # What a spawn worker redoes: all the main thread ran until the loop (the interpreter's start, the
            # imports, the top level), less the work inside the guard, which it does not run
            out.update(guarded_cpu_s=round(guarded_cpu, 3), redo_cpu_s=round(max(0.0, main_cpu - guarded_cpu), 3))
    return out


def _top_level_split(
    profile: list[tuple[Any, float]], main_file: str, blocks: list[tuple[int, int]], real_paths: dict[str, str]
) -> dict[str, float]:
    """The profile's seconds (wall or CPU) split into the top level's imports and other work outside the guard, the
    work inside it, and every import. `real_paths` caches os.path.realpath by file name: a stack cut before the
    script's frame has dozens of `<module>` frames, and a realpath each (an lstat per directory) was most of the
    check's time (1,400 calls for `import torch`: 0.09-0.12 s of CPU before the first batch, now 0.03)."""

    def real(path: str) -> str:
        found = real_paths.get(path)
        if found is None:
            found = real_paths[path] = os.path.realpath(path)
        return found

    imports = work = guarded = all_imports = 0.0
    for stack, seconds in profile:
        at = next((i for i, f in enumerate(stack) if f[1] == "<module>" and real(f[0]) == main_file), None)
        # importlib's frames inside the script's (the script itself may run inside the import of sitecustomize);
        # a stack cut at the profiler's depth has lost the script's frame: an import that deep is one of the
        # top level's (torch's own imports), counted there
        inner = stack if at is None else stack[at + 1 :]
        importing = any(f[0].startswith("<frozen importlib") for f in inner)
        if at is None and not importing:
            continue  # before the script's first line
        all_imports += seconds if importing else 0.0
        if at is not None and _inside(stack[at][2], blocks):
            guarded += seconds
        elif importing:
            imports += seconds
        else:
            work += seconds
    return {"imports": imports, "work": work, "guarded": guarded, "all_imports": all_imports}


# -- the loader -----------------------------------------------------------------------------------------------------


def start_method_in_use(loader: Any) -> tuple[str, bool]:
    """(the method the loader's workers will start with, whether the script chose it), read without pinning one:
    the loader's multiprocessing_context, else the global method if set, else this interpreter's default."""
    import multiprocessing
    import multiprocessing.context

    ctx = loader.multiprocessing_context
    if ctx is not None:
        return str(ctx.get_start_method()), True
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen is not None:
        return str(chosen), True
    # The platform's default context itself: multiprocessing.get_context() would pin it as the method in use
    default = multiprocessing.context._default_context._default_context
    return str(default.get_start_method()), False


def cpu_share() -> float | None:
    """The share of its life so far this process ran when it was runnable (/proc/self/schedstat: on a CPU, and
    waiting for one): how much of its start-up's wall time was its own work on a busy machine."""
    runnable = _runnable_s()
    return round(runnable[0] / runnable[1], 3) if runnable and runnable[1] > 0 else None


def _runnable_s() -> tuple[float, float] | None:
    """(on-CPU seconds, runnable seconds) of this process's main thread so far (/proc/self/schedstat)."""
    try:
        with open("/proc/self/schedstat") as f:
            on_cpu, waited = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return None
    return on_cpu / 1e9, (on_cpu + waited) / 1e9


def share_now() -> dict[str, float]:
    """The share of a core a CPU-bound process gets just before the workers start: the main thread's over the last
    seconds before the loop (the start-up profile's readings; its first seconds are shared with the probe's own
    supervisor starting, which the workers are not) together with this check's copy's (CPU-bound, right now).
    Called in the copy, at the end of the check. Empty where neither was read."""
    from dlprobe.in_training import startup_profile

    parts = [r for r in (startup_profile.recent_runnable(), _runnable_s()) if r is not None]
    on_cpu, runnable = sum(r[0] for r in parts), sum(r[1] for r in parts)
    if runnable < MIN_RUNNABLE_S:
        return {}  # too little to tell a share from one scheduling slice
    return {"share_now": round(min(1.0, on_cpu / runnable), 3), "share_now_runnable_s": round(runnable, 3)}


def forkserver_state() -> dict[str, Any]:
    """What a forkserver would have ready for the workers: whether it is already running (an earlier loader started
    it: no new server to wait for), the modules it preloads, and whether `__main__` among them is really imported
    there. Before CPython's fix (3.14, 3.13.8) the server never imported `__main__` (gh-126631: it asked
    get_preparation_data() for 'main_path', which is named 'init_main_from_path'), so every worker imported the
    script again; since then the server imports it once and each worker forks with its imports done."""
    import multiprocessing.forkserver as fs

    server = getattr(fs, "_forkserver", None)
    preload = [str(m) for m in getattr(server, "_preload_modules", None) or []]
    ensure = getattr(getattr(fs, "ForkServer", None), "ensure_running", None)
    fixed = "init_main_from_path" in getattr(getattr(ensure, "__code__", None), "co_consts", ())
    return {
        "running": getattr(server, "_forkserver_pid", None) is not None,
        "preload": preload[:8],
        "preloads_main": "__main__" in preload and fixed,
    }


def readiness(loader: Any, user_worker_init: Any) -> dict[str, Any]:
    """The start_readiness event's fields for one loader (the caller emits it)."""
    method, chosen = start_method_in_use(loader)
    started = time.perf_counter()
    deadline = started + MAX_PICKLE_S
    handed = [("dataset", loader.dataset), ("collate_fn", loader.collate_fn)]
    if user_worker_init is not None:
        handed.append(("worker_init_fn", user_worker_init))
    # the dataset gets the bound; collate_fn and worker_init_fn (functions, pickled by name) a little more each
    cpu_started = time.process_time()
    objects = [check_pickle(name, obj, max(deadline, time.perf_counter() + EXTRA_S) if name != "dataset" else deadline)
               for name, obj in handed]  # fmt: skip
    pickle_s = time.perf_counter() - started
    pickle_cpu_s = time.process_time() - cpu_started
    copy, truncated = copy_bytes([obj for _, obj in handed])
    size_s = time.perf_counter() - started - pickle_s
    done = all(o["picklable"] is not None for o in objects)
    complete = all(o["picklable"] for o in objects)
    return {
        "start_method": method,
        "chosen": chosen,
        "num_workers": int(loader.num_workers),
        "persistent_workers": bool(loader.persistent_workers),
        "objects": objects,
        "picklable": all(o["picklable"] for o in objects)
        if done
        else (False if any(o["picklable"] is False for o in objects) else None),  # fmt: skip
        # all of it, or nothing: what part of a failing object pickled says nothing of what a worker would get
        "pickled_bytes": sum(o["pickled_bytes"] or 0 for o in objects) if complete else None,
        "pickle_s": round(pickle_s, 4),
        "pickle_cpu_s": round(pickle_cpu_s, 4),  # the in-band part: what the parent pickles again for each worker
        "buffer_bytes": sum(o.get("buffer_bytes", 0) for o in objects),  # large arrays, counted by length
        "copy_bytes": copy,
        "copy_truncated": truncated,
        "size_s": round(size_s, 4),
        "tensors": sum(o.get("tensors", 0) for o in objects),
        "tensor_bytes": sum(o.get("tensor_bytes", 0) for o in objects),
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_share": cpu_share(),
        "load": round(os.getloadavg()[0], 2),
        "main": main_script(),
        "forkserver": forkserver_state(),
        **share_now(),
    }
