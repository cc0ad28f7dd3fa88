"""Describe a batch: its tensor leaves with dtype, shape and bytes, without copying anything."""

from __future__ import annotations

import sys
from typing import Any

MAX_LEAVES = 32


def describe_batch(batch: Any) -> dict[str, Any]:
    """Total bytes of the tensors/arrays in a batch, and up to MAX_LEAVES leaves with dtype and shape."""
    leaves: list[dict[str, Any]] = []
    total = _visit(batch, "batch", leaves, 0)
    return {"bytes": total, "leaves": leaves[:MAX_LEAVES]}


def _visit(obj: Any, path: str, leaves: list[dict[str, Any]], depth: int) -> int:
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(obj, torch.Tensor):
        nbytes = obj.element_size() * obj.nelement()
        leaves.append({"path": path, "dtype": str(obj.dtype), "shape": list(obj.shape), "bytes": nbytes})
        return int(nbytes)
    if np is not None and isinstance(obj, np.ndarray):
        leaves.append({"path": path, "dtype": str(obj.dtype), "shape": list(obj.shape), "bytes": obj.nbytes})
        return int(obj.nbytes)
    if depth > 6:
        return 0
    if isinstance(obj, dict):
        return sum(_visit(v, f"{path}[{k!r}]", leaves, depth + 1) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(_visit(v, f"{path}[{i}]", leaves, depth + 1) for i, v in enumerate(obj))
    return 0
