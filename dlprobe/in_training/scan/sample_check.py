"""Checks one sample cheaply: its structure signature (shapes, dtypes), `None` parts, and NaN/Inf values.

Runs in the scan workers, once per sample, so it touches each value at most once: a float tensor is summed
(NaN or Inf make the sum non-finite) and only a non-finite sum pays for counting.
"""

from __future__ import annotations

import math
import sys
from typing import Any

# A sequence longer than this is summarised by its length and first element instead of walked item by item.
MAX_SEQUENCE_ITEMS = 64
MAX_DEPTH = 8

Signature = tuple[Any, ...]


class SampleIssue:
    """A problem found in one sample: kind is 'none' or 'nan'."""

    __slots__ = ("kind", "detail")

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail


def check_sample(sample: Any, shapes: bool) -> tuple[Signature | None, SampleIssue | None]:
    """The sample's signature (None for a None sample) and its first problem, if any.

    With shapes=False the signature leaves shapes and lengths out, so only dtypes and structure are compared.
    """
    if sample is None:
        return None, SampleIssue("none", "sample is None")
    issues: list[SampleIssue] = []
    signature = _signature(sample, "sample", shapes, issues, 0)
    return signature, (issues[0] if issues else None)


def _signature(value: Any, path: str, shapes: bool, issues: list[SampleIssue], depth: int) -> Signature:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            _check_finite_tensor(torch, value, path, issues)
        return ("tensor", tuple(value.shape) if shapes else None, str(value.dtype).replace("torch.", ""))
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind in "fc":
            _check_finite_array(np, value, path, issues)
        kind = "ndarray" if isinstance(value, np.ndarray) else "numpy scalar"
        return (kind, tuple(value.shape) if shapes else None, str(value.dtype))
    if value is None:
        issues.append(SampleIssue("none", f"{path} is None"))
        return ("None",)
    if isinstance(value, float):
        if not math.isfinite(value):
            issues.append(SampleIssue("nan", f"{path} is {value}"))
        return ("number", None, "float")
    if isinstance(value, (bool, int, complex)):
        return ("number", None, type(value).__name__)
    if isinstance(value, (str, bytes)):
        return (type(value).__name__,)
    if depth >= MAX_DEPTH:
        return ("object", type(value).__qualname__)
    if isinstance(value, dict):
        items = tuple(
            (repr(key), _signature(item, f"{path}[{key!r}]", shapes, issues, depth + 1))
            for key, item in sorted(value.items(), key=lambda kv: repr(kv[0]))
        )
        return ("dict", items)
    if isinstance(value, (list, tuple)):
        name = type(value).__name__
        if len(value) > MAX_SEQUENCE_ITEMS:
            first = _signature(value[0], f"{path}[0]", shapes, issues, depth + 1)
            return ("long " + name, len(value) if shapes else None, first)
        return (name, tuple(_signature(v, f"{path}[{i}]", shapes, issues, depth + 1) for i, v in enumerate(value)))
    size, mode = getattr(value, "size", None), getattr(value, "mode", None)
    if isinstance(size, tuple) and isinstance(mode, str):  # a PIL image: size is its shape, mode its dtype
        return ("image", size if shapes else None, mode)
    return ("object", type(value).__qualname__)


def _check_finite_tensor(torch: Any, value: Any, path: str, issues: list[SampleIssue]) -> None:
    try:
        if value.numel() == 0 or bool(torch.isfinite(value.sum())):
            return
        nan = int(torch.isnan(value).sum())
        inf = int(torch.isinf(value).sum())
    except Exception:  # sparse, meta or otherwise exotic tensors: nothing cheap to say
        return
    _record_non_finite(nan, inf, value.numel(), path, issues)


def _check_finite_array(np: Any, value: Any, path: str, issues: list[SampleIssue]) -> None:
    with np.errstate(all="ignore"):
        if value.size == 0 or np.isfinite(value.sum()):
            return
        nan = int(np.isnan(value).sum())
        inf = int(np.isinf(value).sum())
    _record_non_finite(nan, inf, int(value.size), path, issues)


def _record_non_finite(nan: int, inf: int, total: int, path: str, issues: list[SampleIssue]) -> None:
    # A finite tensor whose sum overflowed has neither; that is not a bad sample.
    parts = [f"{n} {name}" for n, name in ((nan, "NaN"), (inf, "Inf")) if n]
    if parts:
        issues.append(SampleIssue("nan", f"{path} has {' and '.join(parts)} of {total} values"))


def leaves(signature: Signature, path: str = "sample") -> list[tuple[str, Signature]]:
    """Flatten a signature into (path, leaf) pairs; containers become paths."""
    kind = signature[0]
    if kind == "dict":
        out: list[tuple[str, Signature]] = []
        for key, sub in signature[1]:
            out.extend(leaves(sub, f"{path}[{key}]"))
        return out
    if kind in ("list", "tuple"):
        out = []
        for i, sub in enumerate(signature[1]):
            out.extend(leaves(sub, f"{path}[{i}]"))
        return out
    return [(path, signature)]


def describe(signature: Signature) -> str:
    """A short human form: '(tensor[3, 64, 64] float32, int)'."""
    kind = signature[0]
    if kind == "dict":
        return "{" + ", ".join(f"{key}: {describe(sub)}" for key, sub in signature[1]) + "}"
    if kind in ("list", "tuple"):
        inner = ", ".join(describe(sub) for sub in signature[1])
        return f"[{inner}]" if kind == "list" else f"({inner})"
    if kind in ("tensor", "ndarray", "numpy scalar", "image"):
        shape = "" if signature[1] is None else "[" + ", ".join(str(d) for d in signature[1]) + "]"
        return f"{kind}{shape} {signature[2]}"
    if kind == "number":
        return str(signature[2])
    if kind.startswith("long "):
        length = "" if signature[1] is None else f" of {signature[1]}"
        return f"{kind[5:]}{length} x {describe(signature[2])}"
    if kind == "object":
        return str(signature[1])
    return str(kind)


def compare(signature: Signature, majority: Signature) -> tuple[str, str] | None:
    """('shape' | 'dtype', what differs) between a sample's signature and the majority's; None if equal."""
    if signature == majority:
        return None
    mine, theirs = leaves(signature), leaves(majority)
    same_paths = [p for p, _ in mine] == [p for p, _ in theirs]
    if not same_paths or any(a[0] != b[0] for (_, a), (_, b) in zip(mine, theirs, strict=True)):
        return "shape", f"structure {describe(signature)}, expected {describe(majority)}"
    for (path, a), (_, b) in zip(mine, theirs, strict=True):
        if len(a) > 2 and a[1] != b[1]:
            what = "length" if a[0].startswith("long ") else "shape"
            return "shape", f"{path} has {what} {_dims(a[1])}, expected {_dims(b[1])}"
    for (path, a), (_, b) in zip(mine, theirs, strict=True):
        if a != b:
            return "dtype", f"{path} has dtype {a[-1]}, expected {b[-1]}"
    return "shape", f"structure {describe(signature)}, expected {describe(majority)}"


def _dims(shape: Any) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, tuple) else str(shape)
