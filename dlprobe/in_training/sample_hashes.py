"""Counts repeated samples in an IterableDataset's batches by hashing each sample's bytes as batches arrive."""

from __future__ import annotations

import hashlib
import heapq
import sys
from typing import Any

MAX_SAMPLES = 200_000  # per epoch; enough to see duplication, bounded memory (8-byte digests)
ROW_BYTES = 8192  # a sample bigger than this is hashed from an evenly strided subset of its elements
# In a distributed job each rank keeps the SKETCH_SIZE smallest digests of an epoch (a bottom-k sketch): ranks that
# read the same samples keep the same digests, so comparing sketches estimates the overlap without the full sets.
SKETCH_SIZE = 64
# A map-style loader is hashed only for the sketch: telling samples apart needs far fewer bytes than counting repeats
# of a stream does, and hashing 256 bytes instead of 8 KiB keeps a batch of 256 images well under a millisecond.
SKETCH_ROW_BYTES = 256


def _rows(leaf: Any, n: int, row_bytes: int = ROW_BYTES) -> list[bytes] | None:
    """Per-sample bytes of one batch leaf with n samples, or None when the leaf is not per-sample."""
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(leaf, torch.Tensor):
        if leaf.device.type != "cpu" or np is None or leaf.dim() == 0 or leaf.shape[0] != n:
            return None
        leaf = leaf.detach().numpy()
    if np is not None and isinstance(leaf, np.ndarray):
        if leaf.ndim == 0 or leaf.shape[0] != n or leaf.dtype == object:
            return None
        flat = leaf.reshape(n, -1)
        step = max(1, flat.shape[1] * flat.itemsize // row_bytes)
        if step > 1:
            flat = flat[:, ::step]
        return [flat[i].tobytes() for i in range(n)]
    if (
        isinstance(leaf, (list, tuple))
        and len(leaf) == n
        and all(isinstance(v, (str, bytes, int, float)) for v in leaf)
    ):
        return [repr(v).encode() for v in leaf]
    return None


def _leaves(batch: Any, out: list[Any], depth: int = 0) -> None:
    if isinstance(batch, dict) and depth < 4:
        for v in batch.values():
            _leaves(v, out, depth + 1)
    elif (
        isinstance(batch, (list, tuple))
        and depth < 4
        and not all(isinstance(v, (str, bytes, int, float)) for v in batch)
    ):
        for v in batch:
            _leaves(v, out, depth + 1)
    else:
        out.append(batch)


def _batch_size(leaves: list[Any]) -> int | None:
    for leaf in leaves:
        shape = getattr(leaf, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return None


class DuplicateCounter:
    """Samples seen and distinct samples in one epoch of one loader."""

    def __init__(self, sketch: bool = False, row_bytes: int = ROW_BYTES) -> None:
        self.row_bytes = row_bytes
        self.sketch: list[int] | None = [] if sketch else None  # a max-heap (negated) of the smallest digests
        self.samples = 0
        self.seen: set[bytes] = set()
        self.duplicates = 0
        self.first_duplicate_at: int | None = None
        self.unhashable = False
        self.changed = False

    def add_batch(self, batch: Any) -> None:
        if self.unhashable or self.samples >= MAX_SAMPLES:
            return
        leaves: list[Any] = []
        _leaves(batch, leaves)
        n = _batch_size(leaves)
        if n is None:
            self.unhashable = True
            return
        per_leaf = [rows for rows in (_rows(leaf, n, self.row_bytes) for leaf in leaves) if rows is not None]
        if not per_leaf:
            self.unhashable = True
            return
        for i in range(n):
            h = hashlib.blake2b(digest_size=8)
            for rows in per_leaf:
                h.update(rows[i])
            digest = h.digest()
            if self.sketch is not None and digest not in self.seen:
                self._add_to_sketch(int.from_bytes(digest, "big"))
            if digest in self.seen:
                self.duplicates += 1
                if self.first_duplicate_at is None:
                    self.first_duplicate_at = self.samples
            else:
                self.seen.add(digest)
            self.samples += 1
        self.changed = True

    def _add_to_sketch(self, value: int) -> None:
        sketch = self.sketch
        if sketch is None:
            return
        if len(sketch) < SKETCH_SIZE:
            heapq.heappush(sketch, -value)
        elif value < -sketch[0]:
            heapq.heapreplace(sketch, -value)

    def summary(self) -> dict[str, Any]:
        self.changed = False
        extra = {"digests": sorted(f"{-v:016x}" for v in self.sketch)} if self.sketch is not None else {}
        return {
            **extra,
            "samples": self.samples,
            "unique": len(self.seen),
            "duplicates": self.duplicates,
            "first_duplicate_at": self.first_duplicate_at,
            "capped": self.samples >= MAX_SAMPLES,
        }
