"""Why a loader's workers could not start under spawn or forkserver, named while the process still holds the objects.

Two failures, each read where it happens:
- the training process could not pickle what every worker is handed (the dataset, collate_fn, worker_init_fn):
  `Process.start()` raised in `iter(loader)`. pickle's message names a type ("Can't pickle local object
  'build.<locals>.<lambda>'", "cannot pickle '_io.BufferedReader' object") but not where it sits; `blame` walks the
  objects again, only on this failure path, to the attribute that refuses (dataset.transform), by the walk start
  readiness makes before the workers start (in_training/pickle_walk.py).
- a worker re-running the script (spawn and forkserver import `__main__` again in each worker) reached a loader's
  `iter()` at the script's top level: multiprocessing is still "bootstrapping" there and refuses to start processes.
  The worker itself knows (`current_process()._inheriting`), and where in the script it is.
"""

from __future__ import annotations

import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any

from dlprobe.in_training.pickle_walk import deepest_refusal

# The walk runs once, after a failure; these bound it on a huge dataset (a list of a million records).
MAX_DEPTH = 12
MAX_CHILDREN = 2000
MAX_SECONDS = 5.0
_HANDLE_TYPES = ("TextIOWrapper", "BufferedReader", "BufferedWriter", "FileIO", "socket", "lock", "RLock")


@dataclass
class Blame:
    path: str  # dataset.transform, collate_fn, dataset.records[3].fn
    object_type: str
    reason: str  # a lambda / a local object (defined inside f) / an open handle / pickle's own message


class _LeafPickler(pickle.Pickler):
    """pickle with tensors and arrays taken as picklable without copying them: they are never the culprit (torch's
    reductions share them), and pickling a large one to find a lambda would cost its size in time and memory."""

    def reducer_override(self, obj: Any) -> Any:
        name = type(obj).__name__
        if name in ("Tensor", "Parameter", "ndarray", "memmap") or type(obj).__module__.startswith("torch"):
            return (int, ())
        return NotImplemented


def _refused(obj: Any) -> BaseException | None:
    """The exception pickling `obj` raises (None: it pickles)."""
    import io

    try:
        _LeafPickler(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except RecursionError:
        return None  # too deep to tell, not refused
    except Exception as exc:
        return exc
    return None


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ in ("builtins", "__main__") else f"{cls.__module__}.{cls.__qualname__}"


def _enclosing(qualname: str) -> str:
    """The function a local object was defined in: 'main' of 'main.<locals>.<lambda>', 'Ds.__init__' of
    'Ds.__init__.<locals>.<lambda>', the innermost of nested ones."""
    return qualname.rsplit(".<locals>", 1)[0].split(".<locals>.")[-1]


def _reason(obj: Any, exc: BaseException) -> str:
    qualname = getattr(obj, "__qualname__", "") or ""
    if getattr(obj, "__name__", None) == "<lambda>":
        where = _enclosing(qualname) if "<locals>" in qualname else None
        return f"a lambda (defined in {where})" if where else "a lambda (pickle finds no name to import it by)"
    if "<locals>" in qualname:
        return f"a local object '{qualname}' (defined inside {_enclosing(qualname)}())"
    if "<locals>" in type(obj).__qualname__:
        return f"an instance of the local class '{type(obj).__qualname__}'"
    if any(handle in type(obj).__name__ for handle in _HANDLE_TYPES):
        return f"a handle or lock ({type(obj).__name__}): open or create it in the worker instead"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def blame(roots: list[tuple[str, Any]]) -> Blame | None:
    """The deepest object under `roots` that pickle refuses although everything it holds pickles, or None when every
    root pickles (the failure was something else)."""
    deadline = time.perf_counter() + MAX_SECONDS
    for name, root in roots:
        exc = _refused(root)
        if exc is not None:
            path, culprit, culprit_exc = deepest_refusal(
                name, root, exc, _refused, limit=MAX_CHILDREN, deadline=deadline, max_depth=MAX_DEPTH
            )
            return Blame(path, _type_name(culprit), _reason(culprit, culprit_exc))
    return None


def worker_roots(loader: Any, worker_init_fn: Any) -> list[tuple[str, Any]]:
    """What torch hands every worker process (its `_worker_loop` arguments) that the script chose."""
    roots = [("dataset", loader.dataset), ("collate_fn", loader.collate_fn)]
    if worker_init_fn is not None:
        roots.append(("worker_init_fn", worker_init_fn))
    return roots


def script_frame() -> tuple[str | None, int | None]:
    """The file and line of the script's own top level (`__mp_main__` in a worker re-running it) on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") in ("__mp_main__", "__main__") and frame.f_code.co_name == "<module>":
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None, None
