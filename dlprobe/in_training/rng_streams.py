"""Random generators a dataset holds, followed into its workers: does every worker draw the same random stream?

A generator made in `Dataset.__init__` (`np.random.default_rng(seed)`, `random.Random(seed)`, `torch.Generator`) is
copied into each worker with the dataset (by fork, or pickled under spawn), and again each epoch where the workers
restart. torch seeds only the global generators per worker (`random`, `torch`, numpy's legacy `np.random`:
torch/utils/data/_utils/worker.py `_worker_loop`), never one an object holds, so every worker starts that one at the
same state and draws the same numbers.

As a loader's workers are started, a bounded walk of the dataset's objects finds the generators (MAX_OBJECTS objects,
MAX_DEPTH levels; unlike fork_handles' walk it goes into callable objects too: an augmentation object holding its own
generator is the common case) and fingerprints each one's state. The loader's worker_init_fn is wrapped (around
dlprobe's own wrapper, which calls the script's): each worker fingerprints the same attributes once it has run, and
again after its first batch (one fetch wrapped once, then put back), then writes one EV_WORKER_RNG event. Cost: the
walk once per start of workers, two fingerprints per generator per worker (tens of microseconds); nothing per batch
past the first."""

from __future__ import annotations

import hashlib
import sys
import types
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_WORKER_RNG

MAX_OBJECTS = 300
MAX_DEPTH = 4
MAX_ITEMS = 16
MAX_RNGS = 8
_PLAIN = (str, bytes, bytearray, int, float, bool, complex, type(None), type, types.ModuleType, types.FunctionType,
          types.BuiltinFunctionType, types.MethodType, types.CodeType, types.FrameType)  # fmt: skip

Step = tuple[str, Any]  # ("a", attribute name) or ("i", key or index)


def rng_kind(obj: Any) -> str | None:
    """ "random", "numpy", "numpy-legacy" or "torch" for a generator object with a state of its own, else None."""
    random = sys.modules.get("random")
    if random is not None and isinstance(obj, random.Random):
        return None if isinstance(obj, random.SystemRandom) else "random"  # the OS's entropy: no state to copy
    nr = sys.modules.get("numpy.random")
    if nr is not None:
        if isinstance(obj, nr.Generator):
            return "numpy"
        if isinstance(obj, nr.RandomState):
            return "numpy-legacy"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Generator):
        return "torch"
    return None


def _feed(h: Any, value: Any, depth: int = 0) -> None:
    if isinstance(value, dict) and depth < 4:
        for k in sorted(value, key=str):
            h.update(str(k).encode())
            _feed(h, value[k], depth + 1)
    elif isinstance(value, (list, tuple)) and depth < 4 and not all(type(v) is int for v in value):
        for v in value:
            _feed(h, v, depth + 1)
    elif hasattr(value, "tobytes"):  # a numpy array (MT19937's key): repr() would elide its middle
        h.update(value.tobytes())
    elif type(value).__name__ == "Tensor" and hasattr(value, "numpy"):
        h.update(value.numpy().tobytes())
    else:
        h.update(repr(value).encode())


def fingerprint(obj: Any, kind: str | None = None) -> str | None:
    """16 hex digits of a hash of the generator's whole state: equal states, equal fingerprints."""
    kind = kind or rng_kind(obj)
    if kind == "random":
        state: Any = obj.getstate()
    elif kind == "numpy":
        state = obj.bit_generator.state
    elif kind == "numpy-legacy":
        state = obj.get_state(legacy=False)
    elif kind == "torch":
        state = obj.get_state()
    else:
        return None
    h = hashlib.blake2b(digest_size=8)
    _feed(h, state)
    return h.hexdigest()


def owner_of(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def path_text(steps: list[Step]) -> str:
    return "self" + "".join(f".{key}" if kind == "a" else f"[{key!r}]" for kind, key in steps)


def _children(obj: Any) -> list[tuple[Step, Any]]:
    if isinstance(obj, dict):
        return [(("i", k), v) for k, v in list(obj.items())[:MAX_ITEMS] if isinstance(k, (str, int))]
    if isinstance(obj, (list, tuple)):
        return [(("i", i), v) for i, v in enumerate(obj[:MAX_ITEMS])]
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return []
    return [(("a", k), v) for k, v in list(attrs.items())[:64] if isinstance(k, str)]


def _is_leaf(obj: Any) -> bool:
    if isinstance(obj, _PLAIN):
        return True
    module = type(obj).__module__
    return module.startswith(("numpy", "torch")) and type(obj).__name__ in ("ndarray", "Tensor", "memmap", "Parameter")


def find_rngs(dataset: Any) -> list[dict[str, Any]]:
    """[{steps, attribute, owner, kind, state}] for the generators reachable from the dataset (shortest path first)."""
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    queue: list[tuple[list[Step], Any]] = [([], dataset)]
    while queue and len(seen) < MAX_OBJECTS and len(found) < MAX_RNGS:
        steps, obj = queue.pop(0)
        if id(obj) in seen or _is_leaf(obj):
            continue
        seen.add(id(obj))
        kind = rng_kind(obj)
        if kind is not None:
            found.append({"steps": steps, "attribute": path_text(steps), "owner": owner_of(obj), "kind": kind,
                          "state": fingerprint(obj, kind)})  # fmt: skip
            continue
        if len(steps) < MAX_DEPTH:
            queue.extend(([*steps, step], child) for step, child in _children(obj))
    return found


def resolve(root: Any, steps: list[Step]) -> Any:
    """The object at the path, read without running a property or a __getattr__; None where it is gone."""
    obj = root
    for kind, key in steps:
        if kind == "a":
            attrs = getattr(obj, "__dict__", None)
            if not isinstance(attrs, dict) or key not in attrs:
                return None
            obj = attrs[key]
        elif isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, (list, tuple)) and isinstance(key, int) and key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


class RngCheck:
    """Stands in for the loader's worker_init_fn while its workers start: calls the one it wraps (dlprobe's, which
    calls the script's) exactly as the DataLoader would, then notes the dataset's generators in this worker.
    Picklable (spawn, forkserver): the generators travel as their paths, never as objects."""

    def __init__(self, inner: Any, loader_id: int, epoch: int, rngs: list[dict[str, Any]]) -> None:
        self.inner = inner
        self.loader_id = loader_id
        self.epoch = epoch
        self.rngs = [{k: r[k] for k in ("steps", "attribute", "owner", "kind", "state")} for r in rngs]

    def __call__(self, worker_id: int) -> None:
        if self.inner is not None:
            self.inner(worker_id)  # the script's own seeding runs in here: what it sets is what is read next
        try:
            _worker_started(self, worker_id)
        except Exception as exc:  # never break a worker for a check
            probe_errors.record("rng_streams.worker", exc, f"worker {worker_id}'s random generators are not compared")


_pending: dict[str, Any] | None = None  # this worker's generators, until its first batch


def _worker_started(check: RngCheck, worker_id: int) -> None:
    global _pending
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return
    held = []
    for r in check.rngs:
        obj = resolve(info.dataset, r["steps"])
        kind = rng_kind(obj)
        held.append((r, obj if kind else None, fingerprint(obj, kind) if kind else None))
    _pending = {"check": check, "worker_id": worker_id, "dataset": info.dataset, "held": held}
    _watch_first_fetch()


_wrapped: list[tuple[type, Any]] = []


def _watch_first_fetch() -> None:
    """Wrap the fetchers' `fetch` once in this worker: after the first batch, read the generators again, put the
    fetch back. (The fetchers are this worker's own copies of torch's classes: the training process is untouched.)"""
    from torch.utils.data._utils import fetch

    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        previous = cls.__dict__.get("fetch")
        if previous is None:
            continue

        def _fetch_once(self: Any, index: Any, _previous: Any = previous) -> Any:
            try:
                return _previous(self, index)
            finally:
                _after_first_batch()

        _wrapped.append((cls, previous))
        cls.fetch = _fetch_once  # type: ignore[method-assign]


def _after_first_batch() -> None:
    global _pending
    for cls, previous in _wrapped:
        cls.fetch = previous  # type: ignore[attr-defined]
    _wrapped.clear()
    pending, _pending = _pending, None
    if pending is None:
        return
    try:
        check: RngCheck = pending["check"]
        rngs = []
        for r, obj, start in pending["held"]:
            now = resolve(pending["dataset"], r["steps"])
            replaced = obj is None or now is not obj
            rngs.append({"attribute": r["attribute"], "owner": r["owner"], "parent": r["state"], "start": start,
                         "after": None if replaced else fingerprint(obj, r["kind"]), "replaced": replaced})  # fmt: skip
        log = get_log()
        if log is not None:
            log.emit(EV_WORKER_RNG, loader=check.loader_id, epoch=check.epoch, worker_id=pending["worker_id"],
                     rngs=rngs)  # fmt: skip
    except Exception as exc:  # never break a worker's batch for a check
        probe_errors.record("rng_streams.after", exc, "a worker's random generators are not compared")


NOT_SWAPPED = object()


def wrap_worker_init(loader: Any, loader_id: int, epoch: int) -> Any:
    """As the loader's workers are about to start: find the dataset's generators and wrap the worker_init_fn to
    follow them; returns what restore_worker_init puts back."""
    if get_log() is None:
        return NOT_SWAPPED
    try:
        rngs = find_rngs(loader.dataset)
        if not rngs:
            return NOT_SWAPPED
        original = loader.worker_init_fn
        loader.worker_init_fn = RngCheck(original, loader_id, epoch, rngs)
    except Exception as exc:  # an exotic dataset (or a read-only worker_init_fn) must never break training
        probe_errors.record("rng_streams.walk", exc, f"loader {loader_id}'s random generators are not followed")
        return NOT_SWAPPED
    return original


def restore_worker_init(loader: Any, original: Any) -> None:
    if original is not NOT_SWAPPED:
        loader.worker_init_fn = original
