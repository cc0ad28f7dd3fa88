"""The samples of a batch that did not collate, compared by structure: which ones are unlike the rest.

torch's collate errors often name no sample: inside a worker, default_collate stacks tensors into shared memory
sized after the first sample, and a sample of another shape fails with "Trying to resize storage that is not
resizable"; a dict missing a key fails with a KeyError. The sample check loads each sample of the failing batch
again (in the sandbox, in_training/sandbox.py) and describes it by its structure only (types, shapes, dtypes, keys;
never values), so the report can name the odd ones and what the rest have.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from dlprobe.rundir.schema import SAMPLE_CHECK_ALIKE, SAMPLE_CHECK_ODD

MAX_SAMPLES = 256  # a batch bigger than this is compared on its first MAX_SAMPLES samples
MAX_DEPTH = 4
MAX_ITEMS = 16  # of a list, tuple or dict: the rest are counted, not described
MAX_TEXT = 200


def signature(sample: Any, depth: int = 0) -> str:
    """A sample's structure: `Tensor(3, 16, 16) float32`, `(Tensor(3, 16, 16) float32, int)`, `{label: int, ...}`."""
    text = _signature(sample, depth)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _signature(obj: Any, depth: int) -> str:
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(obj, torch.Tensor):
        return f"Tensor{_shape(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    if np is not None and isinstance(obj, np.ndarray):
        return f"ndarray{_shape(obj.shape)} {obj.dtype}"
    if np is not None and isinstance(obj, np.generic):
        return f"numpy.{type(obj).__name__}"
    image = sys.modules.get("PIL.Image")
    if image is not None and isinstance(obj, image.Image):
        return f"Image {obj.mode} {obj.size[0]}x{obj.size[1]}"
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return type(obj).__name__
    if depth >= MAX_DEPTH:
        return type(obj).__name__
    if isinstance(obj, dict):
        keys = sorted(obj, key=str)
        inner = ", ".join(f"{k}: {_signature(obj[k], depth + 1)}" for k in keys[:MAX_ITEMS])
        return "{" + inner + (f", +{len(keys) - MAX_ITEMS} keys" if len(keys) > MAX_ITEMS else "") + "}"
    if isinstance(obj, (list, tuple)):
        inner = ", ".join(_signature(v, depth + 1) for v in obj[:MAX_ITEMS])
        more = f", +{len(obj) - MAX_ITEMS}" if len(obj) > MAX_ITEMS else ""
        return ("[" + inner + more + "]") if isinstance(obj, list) else ("(" + inner + more + ")")
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _shape(shape: Any) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def odd_ones(signatures: dict[int, str]) -> dict[str, Any]:
    """The sample check's fields for a compared batch: `alike` (one structure), or `odd` with the indices whose
    structure is not the one most samples have. Two structures held by as many samples each cannot say which is
    odd: both are named (`common` is then the first index's)."""
    counts = Counter(signatures.values())
    if len(counts) <= 1:
        only = next(iter(counts), None)
        return {"outcome": SAMPLE_CHECK_ALIKE, "common_signature": only, "compared": len(signatures)}
    ranked = counts.most_common()
    tie = ranked[0][1] == ranked[1][1]
    common = signatures[next(iter(signatures))] if tie else ranked[0][0]
    odd = {index: sig for index, sig in signatures.items() if sig != common}
    return {
        "outcome": SAMPLE_CHECK_ODD,
        "common_signature": common,
        "common_count": counts[common],
        "odd": [{"index": index, "signature": sig} for index, sig in list(odd.items())[:8]],
        "odd_count": len(odd),
        "undecided": tie,
        "compared": len(signatures),
    }
