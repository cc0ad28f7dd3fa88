"""Describe a batch: its tensor leaves with dtype, shape and bytes, without copying anything."""

from __future__ import annotations

import sys
from typing import Any

MAX_LEAVES = 32
RANGE_MAX_ELEMENTS = 64_000_000  # value range of integer leaves is read up to this size (numpy, single thread)


def describe_batch(batch: Any) -> dict[str, Any]:
    """Total bytes of the tensors/arrays in a batch, the bytes of the tensors' storages (each once), and up to
    MAX_LEAVES leaves with dtype and shape. A tensor whose storage is larger than its own bytes is a view of a larger
    one: sharing it from a worker puts the whole storage in /dev/shm."""
    leaves: list[dict[str, Any]] = []
    storages: dict[tuple[str, int], int] = {}
    total = _visit(batch, "batch", leaves, 0, storages)
    return {"bytes": total, "storage_bytes": sum(storages.values()), "leaves": leaves[:MAX_LEAVES]}


def _visit(obj: Any, path: str, leaves: list[dict[str, Any]], depth: int, storages: dict[tuple[str, int], int]) -> int:
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(obj, torch.Tensor):
        nbytes = obj.element_size() * obj.nelement()
        leaf = {"path": path, "dtype": str(obj.dtype), "shape": list(obj.shape), "bytes": nbytes}
        stored = _storage_bytes(obj, storages)
        if stored is not None and stored > nbytes:
            leaf["storage_bytes"] = stored
        if np is not None and obj.device.type == "cpu" and not obj.is_floating_point() and not obj.is_complex():
            leaf.update(_int_range(np, obj.detach().numpy()))
        leaves.append(leaf)
        return int(nbytes)
    if np is not None and isinstance(obj, np.ndarray):
        leaf = {"path": path, "dtype": str(obj.dtype), "shape": list(obj.shape), "bytes": obj.nbytes}
        leaf.update(_int_range(np, obj))
        leaves.append(leaf)
        storages[("array", id(obj))] = int(obj.nbytes)  # pickled as its own bytes, view or not
        return int(obj.nbytes)
    if depth > 6:
        return 0
    if isinstance(obj, dict):
        return sum(_visit(v, f"{path}[{k!r}]", leaves, depth + 1, storages) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(_visit(v, f"{path}[{i}]", leaves, depth + 1, storages) for i, v in enumerate(obj))
    return 0


def _storage_bytes(tensor: Any, storages: dict[tuple[str, int], int]) -> int | None:
    """The bytes of the tensor's storage, counted once per storage in `storages`; None where it has none to read (a
    meta or sparse tensor)."""
    try:
        storage = tensor.untyped_storage()
        key, nbytes = ("storage", int(storage.data_ptr())), int(storage.nbytes())
    except Exception:
        return None
    storages[key] = nbytes
    return nbytes


def _int_range(np: Any, array: Any) -> dict[str, int]:
    """min/max of an integer array, so 'int64 pixels' can be told from real 64-bit values.

    numpy, not torch: a torch reduction could start the OpenMP pool in the training process.
    """
    if array.dtype.kind not in "iu" or array.size == 0 or array.size > RANGE_MAX_ELEMENTS:
        return {}
    try:
        return {"min": int(array.min()), "max": int(array.max())}
    except Exception:
        return {}
