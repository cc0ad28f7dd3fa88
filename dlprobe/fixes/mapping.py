"""`PackedMapping`: a dict of records packed into one byte buffer with a key index, so forked workers copy nothing.

Before (COCO-style annotations or JSON metadata; each forked worker copies the pages of every value it reads,
because reading changes reference counts; dlprobe reports cow-growth on `self.annotations`)::

    self.annotations = {image_id: [path, label, weight] for image_id, path, label, weight in rows}

After (`self.annotations[image_id]` unpickles one value, and the key index is a sorted numpy array of key hashes:
no shared Python object is touched)::

    from dlprobe.fixes import PackedMapping
    self.annotations = PackedMapping({image_id: [path, label, weight] for image_id, path, label, weight in rows})

`share="some-key"` keeps the buffer in /dev/shm as `PackedRecords` does (spawn workers, ranks and later runs map
one copy). Keys are found by their pickled bytes: use str, int, bytes or tuples of them (1 and True, equal in a dict,
are different keys here; a numpy scalar finds the Python value it holds).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import numpy as np

from dlprobe.fixes.packed_buffer import PackedBuffer, _from_packed
from dlprobe.fixes.records import PackedRecords, pack
from dlprobe.units import format_bytes

_KEY_PROTOCOL = 4  # fixed, so a key hashes the same in every process and Python version that shares the buffer


def key_hash(key: Any) -> int:
    """A hash of the key that every process agrees on (Python's hash() of a str differs per process). A numpy
    scalar hashes as the Python value it holds: keys read from `np.asarray(keys)` find what int keys stored."""
    if isinstance(key, np.generic):
        key = key.item()
    digest = hashlib.blake2b(pickle.dumps(key, protocol=_KEY_PROTOCOL), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def pack_mapping(mapping: Mapping[Any, Any]) -> np.ndarray:
    """One uint8 array: the (key, value) records packed by `pack` in key-hash order, padded to 8 bytes, then the
    sorted key hashes (int64)."""
    keys, values = list(mapping.keys()), list(mapping.values())
    hashes = np.fromiter(map(key_hash, keys), dtype=np.int64, count=len(keys))
    order = np.argsort(hashes, kind="stable")
    records = pack((keys[i], values[i]) for i in order.tolist())
    hashes = hashes[order]
    padding = np.zeros(-records.nbytes % 8, dtype=np.uint8)
    return np.concatenate([records, padding, hashes.view(np.uint8)])


class PackedMapping(PackedBuffer, Mapping[Any, Any]):
    """A read-only mapping (keys to anything picklable) stored in one buffer; `len`, `[key]`, `in`, `keys()`,
    `items()` and `get` work as on the dict it was built from (iteration follows the key index, not insertion).

    `mapping`: the dict, or a function returning it (called only when this process packs it).
    `share`: a cache key; the buffer then lives in /dev/shm and is shared by every process on the machine that uses
    the same key (ranks, spawn workers, later runs). The key names the data: use a new key when it changes.
    """

    def __init__(
        self,
        mapping: Mapping[Any, Any] | Callable[[], Mapping[Any, Any]],
        *,
        share: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._build(lambda: pack_mapping(mapping() if callable(mapping) else mapping), share, cache_dir)
        # an existing key holds what an earlier process packed: it must be the same data
        if share and not callable(mapping) and len(mapping) != len(self):
            raise ValueError(
                f"the cache key {share!r} holds {len(self):,} keys but {len(mapping):,} were passed "
                f"(data from an earlier run?); use a new key, or remove it with `dlprobe cache clear {share}`"
            )

    def _attach(self, packed: np.ndarray) -> None:
        self._packed = packed
        self._records: PackedRecords = cast(
            PackedRecords, _from_packed(PackedRecords, packed)
        )  # reads only its own count, offsets and records
        n = len(self._records)
        end = 8 + 8 * (n + 1) + int(self._records._offsets[n])  # count, offsets, records: as `pack` wrote them
        start = end + (-end % 8)
        self._hashes = packed[start : start + 8 * n].view(np.int64)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, key: Any) -> Any:
        try:
            h = key_hash(key)
        except Exception as exc:  # an unpicklable key cannot be one of ours
            raise KeyError(key) from exc
        i = int(np.searchsorted(self._hashes, h))
        while i < len(self._hashes) and self._hashes[i] == h:  # equal hashes sit side by side
            stored, value = self._records[i]
            if stored == key:
                return value
            i += 1
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self._records)):
            yield self._records[i][0]

    def __repr__(self) -> str:
        where = f", shared as {self._key!r}" if self._key else ""
        return f"PackedMapping({len(self):,} keys, {format_bytes(self.nbytes)}{where})"
