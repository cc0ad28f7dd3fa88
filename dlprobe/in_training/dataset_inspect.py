"""Summarise a Dataset: its type, length, size, and the attributes likely to cause copy-on-access growth."""

from __future__ import annotations

import sys
from typing import Any

from dlprobe.in_training import probe_errors

# A container with this many Python objects inside is worth naming as a copy-on-access suspect.
SUSPECT_MIN_OBJECTS = 10_000
SAMPLE_ITEMS = 200  # items sampled to estimate a container's deep size; keeps inspection in milliseconds
MAX_DEPTH = 3  # how far to follow wrapped datasets (Subset.dataset, ConcatDataset.datasets, ...)

_CONTAINERS = (list, tuple, set, frozenset, dict)
_SCALARS = (str, bytes, int, float, bool, type(None))


def _sample(values: Any, n: int) -> list[Any]:
    if isinstance(values, (list, tuple)):
        step = max(1, len(values) // n)
        return list(values[::step][:n])
    out = []
    for i, v in enumerate(values):
        if i >= n:
            break
        out.append(v)
    return out


def _deep(obj: Any, depth: int = 0) -> tuple[int, int]:
    """(estimated bytes, estimated Python objects) of obj and what it holds, by sampling big containers."""
    size = sys.getsizeof(obj)
    if depth > 4:
        return size, 1
    if isinstance(obj, dict):
        items = list(_sample(obj.items(), SAMPLE_ITEMS))
        per_bytes = per_objs = 0
        for k, v in items:
            kb, ko = _deep(k, depth + 1)
            vb, vo = _deep(v, depth + 1)
            per_bytes += kb + vb
            per_objs += ko + vo
        scale = len(obj) / len(items) if items else 0
        return size + int(per_bytes * scale), 1 + int(per_objs * scale)
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = _sample(obj, SAMPLE_ITEMS)
        per_bytes = per_objs = 0
        for v in items:
            vb, vo = _deep(v, depth + 1)
            per_bytes += vb
            per_objs += vo
        scale = len(obj) / len(items) if items else 0
        return size + int(per_bytes * scale), 1 + int(per_objs * scale)
    if _is_numpy_array(obj):
        if obj.dtype == object:
            flat = obj.ravel()
            items = _sample(flat, SAMPLE_ITEMS)
            per = sum(_deep(v, depth + 1)[0] for v in items)
            scale = flat.size / len(items) if items else 0
            return int(obj.nbytes + per * scale), 1 + flat.size
        return int(obj.nbytes), 1
    if _is_tensor(obj):
        return int(obj.element_size() * obj.nelement()), 1
    return size, 1


def _is_numpy_array(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _describe_type(obj: Any) -> str:
    if isinstance(obj, _CONTAINERS) and obj:
        first = next(iter(obj.values() if isinstance(obj, dict) else obj))
        return f"{type(obj).__name__}[{type(first).__name__}]"
    if _is_numpy_array(obj):
        return f"numpy.ndarray[{obj.dtype}]"
    if _is_tensor(obj):
        return f"torch.Tensor[{obj.dtype}]"
    return type(obj).__name__


def _is_dataset(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(obj, torch.utils.data.Dataset)


def _walk(dataset: Any, prefix: str, depth: int, out: list[dict[str, Any]]) -> None:
    try:
        attrs = vars(dataset)
    except TypeError:
        return
    for name, value in attrs.items():
        path = f"{prefix}.{name}"
        if _is_dataset(value) and depth < MAX_DEPTH:
            _walk(value, path, depth + 1, out)
            continue
        if isinstance(value, (list, tuple)) and value and all(_is_dataset(v) for v in value[:8]):
            if depth < MAX_DEPTH:
                for i, sub in enumerate(value[:8]):
                    _walk(sub, f"{path}[{i}]", depth + 1, out)
            continue
        if isinstance(value, _SCALARS) or callable(value) and not isinstance(value, _CONTAINERS):
            continue
        try:
            est_bytes, objects = _deep(value)
            entry = {
                "attribute": path,
                "type": _describe_type(value),
                "items": _items(value),
                "objects": int(objects),
                "est_bytes": int(est_bytes),
            }
        except Exception as exc:  # an exotic attribute must never break the user's training, nor the summary
            probe_errors.record("dataset_inspect.attribute", exc, f"the size of {path} is not in the dataset summary")
            continue
        out.append(entry)


def _items(value: Any) -> int:
    """How many items an attribute holds: a container's length, an array's or tensor's element count, else 1. Only
    numpy's `size` is a number: a tensor's, and many other objects' (an HF IterableDataset's), is a method."""
    if isinstance(value, _CONTAINERS):
        return len(value)
    if _is_tensor(value):
        return int(value.nelement())
    size = getattr(value, "size", 1)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else 1


def _shard_count(dataset: Any) -> int | None:
    """How many shards a streaming dataset says it has (HuggingFace's IterableDataset: num_shards, older n_shards);
    idle-workers compares it with the workers. None where it does not say."""
    for name in ("num_shards", "n_shards"):
        try:
            value = getattr(dataset, name, None)
        except Exception:  # noqa: S112 - a property of the user's own class may raise: no shard count from it
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def summarize_dataset(dataset: Any) -> dict[str, Any]:
    """A JSON-ready summary: type, length, estimated size, and suspects sorted by size."""
    torch = sys.modules.get("torch")
    iterable = bool(torch and isinstance(dataset, torch.utils.data.IterableDataset))
    try:
        length: int | None = len(dataset)
    except Exception:
        length = None
    attributes: list[dict[str, Any]] = []
    _walk(dataset, "self", 0, attributes)
    attributes.sort(key=lambda a: a["est_bytes"], reverse=True)
    suspects = [a for a in attributes if a["objects"] >= SUSPECT_MIN_OBJECTS]
    cls = type(dataset)
    return {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "len": length,
        "iterable": iterable,
        "shards": _shard_count(dataset) if iterable else None,
        "est_bytes": sum(a["est_bytes"] for a in attributes),
        "suspects": suspects[:5],
    }
