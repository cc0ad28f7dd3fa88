"""Summarise a Dataset: its type, length, size, and the attributes likely to cause copy-on-access growth."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

from dlprobe.in_training import probe_errors

# A container with this many Python objects inside is worth naming as a copy-on-access suspect.
SUSPECT_MIN_OBJECTS = 10_000
SAMPLE_ITEMS = 200  # items sampled to estimate a container's deep size; keeps inspection in milliseconds
MAX_DEPTH = 3  # how far to follow wrapped datasets (Subset.dataset, ConcatDataset.datasets, ...)

_CONTAINERS = (list, tuple, set, frozenset, dict, deque)
_SEQUENCES = (list, tuple, set, frozenset, deque)
_SCALARS = (str, bytes, int, float, bool, type(None))
MAX_COLUMNS = 64  # a DataFrame's columns looked at one by one; a wider frame's others are counted by dtype only


def _sample(values: Any, n: int) -> list[Any]:
    if isinstance(values, (list, tuple)) or _is_numpy_array(values):
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
    if isinstance(obj, _SEQUENCES):
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
    if _pandas_kind(obj) == "DataFrame":
        columns = _frame_columns(obj)
        return size + sum(c["est_bytes"] for c in columns), 1 + sum(c["objects"] for c in columns)
    if _pandas_kind(obj) == "Series":
        column = _column(None, obj)
        return size + column["est_bytes"], 1 + column["objects"]
    if _is_plain_instance(obj):  # a record class of the user's: what its attributes hold is what the workers touch
        per_bytes = per_objs = 0
        for v in _sample(list(vars(obj).values()), SAMPLE_ITEMS):
            vb, vo = _deep(v, depth + 1)
            per_bytes += vb
            per_objs += vo
        return size + per_bytes, 1 + per_objs
    return size, 1


_OWN_SIZE = ("__sizeof__", "__reduce__", "__reduce_ex__", "__getstate__")


def _is_plain_instance(obj: Any) -> bool:
    """An instance of an ordinary Python class with a __dict__ (not a module, class, function or a C type's object):
    its attributes are Python objects the walk can count. A class that says its own size or how it pickles
    (dlprobe.fixes' packed buffers, a /dev/shm mapping) is taken at its word: its attributes may be mapped, not held."""
    try:
        attrs = vars(obj)
    except TypeError:
        return False
    cls = type(obj)
    if any(getattr(cls, name, None) is not getattr(object, name, None) for name in _OWN_SIZE):
        return False
    return isinstance(attrs, dict) and not isinstance(obj, type) and not callable(obj) and cls.__module__ not in (
        "builtins", "types")  # fmt: skip


def _pandas_kind(obj: Any) -> str | None:
    """ "DataFrame" or "Series" when obj is one of pandas' (pandas already imported by the user's code), else None."""
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    if isinstance(obj, pd.DataFrame):
        return "DataFrame"
    if isinstance(obj, pd.Series):
        return "Series"
    return None


def _is_object_dtype(dtype: Any) -> bool:
    """numpy's object dtype (a categorical or an extension dtype is not, though its `kind` may say "O")."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(dtype, np.dtype) and dtype.kind == "O"


def _column(name: Any, series: Any) -> dict[str, Any]:
    """One pandas column: its dtype, whether its values are Python objects (an `object` column, or pandas' own
    Python-backed "string" dtype) and, if so, their estimated count and size and the type of the first. A numeric,
    categorical or Arrow-backed column keeps its values in buffers: reading a row writes no reference count."""
    dtype = series.dtype
    storage = getattr(dtype, "storage", None)  # pandas' StringDtype: "python" (Python str objects) or "pyarrow"
    python_objects = _is_object_dtype(dtype) or storage == "python"
    entry: dict[str, Any] = {"name": str(name), "dtype": str(dtype), "python_objects": bool(python_objects)}
    if storage == "pyarrow" or "pyarrow" in str(dtype):
        entry["arrow"] = True
    if not python_objects:
        entry.update(objects=0, est_bytes=int(series.memory_usage(index=False, deep=False)))
        return entry
    values = series.to_numpy(dtype=object) if storage == "python" else series.to_numpy()
    items = _sample(values, SAMPLE_ITEMS)
    per = sum(_deep(v, 1)[0] for v in items)
    scale = len(values) / len(items) if items else 0
    entry.update(objects=len(values), est_bytes=int(values.nbytes + per * scale))
    entry["item"] = type(items[0]).__name__ if items else None
    return entry


def _frame_columns(frame: Any) -> list[dict[str, Any]]:
    """Each column of a DataFrame (the first MAX_COLUMNS; the others only summed as their dtypes say)."""
    out = [_column(name, frame.iloc[:, i]) for i, name in enumerate(frame.columns[:MAX_COLUMNS])]
    rest = frame.iloc[:, MAX_COLUMNS:]
    if rest.shape[1]:
        objects = sum(_is_object_dtype(d) for d in rest.dtypes) * len(rest)
        est = int(rest.memory_usage(index=False, deep=False).sum())
        out.append({"name": f"{rest.shape[1]} more columns", "dtype": "mixed", "python_objects": objects > 0,
                    "objects": objects, "est_bytes": est})  # fmt: skip
    return out


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
    kind = _pandas_kind(obj)
    if kind == "Series":
        return f"pandas.Series[{obj.dtype}]"
    if kind == "DataFrame":
        return "pandas.DataFrame"
    return type(obj).__name__


def _item_type(obj: Any) -> str | None:
    """The type of the first value an object array or a Python-object column holds (str, int, dict...): which remedy
    fits it (a real dtype for numbers, Arrow strings or a packed buffer for the rest)."""
    if _is_numpy_array(obj) and obj.dtype == object and obj.size:
        return type(obj.ravel()[0]).__name__
    if _pandas_kind(obj) == "Series" and len(obj):
        return type(obj.iloc[0]).__name__
    return None


def _is_dataset(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(obj, torch.utils.data.Dataset)


def attribute_values(dataset: Any, prefix: str = "self", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(path, value) of each attribute of the dataset that holds data (not a scalar, not a callable), following
    wrapped datasets (Subset.dataset, ConcatDataset.datasets) MAX_DEPTH levels down. Reads only `vars()`: no
    property, no __getattr__ of the user's runs. The dataset summary walks these once; worker_attrs counts them
    again inside each worker."""
    try:
        attrs = vars(dataset)
    except TypeError:
        return
    for name, value in list(attrs.items()):
        path = f"{prefix}.{name}"
        if _is_dataset(value) and depth < MAX_DEPTH:
            yield from attribute_values(value, path, depth + 1)
            continue
        if isinstance(value, (list, tuple)) and value and all(_is_dataset(v) for v in value[:8]):
            if depth < MAX_DEPTH:
                for i, sub in enumerate(value[:8]):
                    yield from attribute_values(sub, f"{path}[{i}]", depth + 1)
            continue
        if isinstance(value, _SCALARS) or callable(value) and not isinstance(value, _CONTAINERS):
            continue
        yield path, value


def _walk(dataset: Any, prefix: str, depth: int, out: list[dict[str, Any]]) -> None:
    for path, value in attribute_values(dataset, prefix, depth):
        try:
            est_bytes, objects = _deep(value)
            entry = {
                "attribute": path,
                "type": _describe_type(value),
                "items": _items(value),
                "objects": int(objects),
                "est_bytes": int(est_bytes),
            }
            if (item := _item_type(value)) is not None:
                entry["item"] = item
            if _pandas_kind(value) == "DataFrame":
                entry["columns"] = _frame_columns(value)
        except Exception as exc:  # an exotic attribute must never break the user's training, nor the summary
            probe_errors.record("dataset_inspect.attribute", exc, f"the size of {path} is not in the dataset summary")
            continue
        out.append(entry)


def _items(value: Any) -> int:
    """How many items an attribute holds: a container's length, an array's or tensor's element count, else 1. Only
    numpy's `size` is a number: a tensor's, and many other objects' (an HF IterableDataset's), is a method."""
    if isinstance(value, _CONTAINERS):
        return len(value)
    if _pandas_kind(value) is not None:
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
