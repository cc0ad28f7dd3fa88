"""`PackedRecords`: a list of Python records packed into one byte buffer, so forked workers copy nothing.

Before (each forked worker copies the pages of every dict it reads, because reading changes reference counts;
dlprobe reports cow-growth on `self.records`)::

    self.records = [{"path": p, "label": y} for p, y in rows]

After (one numpy buffer plus offsets; `__getitem__` unpickles one record, touching no shared Python object)::

    from dlprobe.fixes import PackedRecords
    self.records = PackedRecords([{"path": p, "label": y} for p, y in rows])

With `share="some-key"` the buffer lives in /dev/shm (`dlprobe.fixes.shm_array`): pickling sends only the key, so
spawn/forkserver workers map the same pages instead of each unpickling a copy, and on a node with several ranks the
first one to get there packs the records and the others attach, so 8 ranks x 8 workers hold them once. Pass a
function instead of the list (`PackedRecords(load_rows, share="train-v1")`) and only that first rank calls it.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

import numpy as np

from dlprobe.fixes.packed_buffer import PackedBuffer
from dlprobe.units import format_bytes

_COUNT = 8  # bytes of the record count at the start of the packed array


def pack(records: Iterable[Any]) -> np.ndarray:
    """One uint8 array: the record count (int64), n + 1 offsets (int64), then the pickled records back to back."""
    if isinstance(records, Mapping):  # iterating a dict gives its keys alone: the values would be lost
        raise TypeError("PackedRecords packs a sequence of records; for a dict use PackedMapping(mapping)")
    chunks = []
    dumps, protocol = pickle.dumps, pickle.HIGHEST_PROTOCOL
    for i, record in enumerate(records):
        try:
            chunks.append(dumps(record, protocol=protocol))
        except Exception as exc:  # PicklingError, TypeError, AttributeError ("Can't pickle local object")
            raise TypeError(
                f"record {i} ({type(record).__module__}.{type(record).__qualname__}) cannot be pickled: {exc}"
            ) from exc
    n = len(chunks)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, chunks), dtype=np.int64, count=n), out=offsets[1:])
    start = _COUNT + offsets.nbytes
    packed = np.empty(start + int(offsets[-1]), dtype=np.uint8)
    packed[:_COUNT] = np.array([n], dtype=np.int64).view(np.uint8)
    packed[_COUNT:start] = offsets.view(np.uint8)
    packed[start:] = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    return packed


class PackedRecords(PackedBuffer, Sequence[Any]):
    """A read-only sequence of records (anything picklable: dicts, tuples, strings) stored in one buffer.

    `records`: the records, or a function returning them (called only when this process packs them).
    `share`: a cache key; the buffer then lives in /dev/shm and is shared by every process on the machine that
    uses the same key (ranks, spawn workers, later runs). The key names the data: use a new key when it changes.
    """

    def __init__(
        self,
        records: Iterable[Any] | Callable[[], Iterable[Any]],
        *,
        share: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._build(lambda: pack(records() if callable(records) else records), share, cache_dir)
        # an existing key holds what an earlier process packed: it must be the same data
        if share and not callable(records) and hasattr(records, "__len__") and len(records) != self._n:  # type: ignore[arg-type]
            raise ValueError(
                f"the cache key {share!r} holds {self._n:,} records but {len(records):,} were passed "  # type: ignore[arg-type]
                f"(data from an earlier run?); use a new key, or remove it with `dlprobe cache clear {share}`"
            )

    def _attach(self, packed: np.ndarray) -> None:
        self._packed = packed
        self._n = int(packed[:_COUNT].view(np.int64)[0])
        start = _COUNT + 8 * (self._n + 1)
        # memoryviews index to plain ints and bytes slices without numpy scalars: the hot path stays cheap
        self._offsets = packed[_COUNT:start].view(np.int64).data
        self._payload = packed[start:].data

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = index.__index__()
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"record index {index} out of range for {self._n} records")
        return pickle.loads(self._payload[self._offsets[i] : self._offsets[i + 1]])

    def __repr__(self) -> str:
        where = f", shared as {self._key!r}" if self._key else ""
        return f"PackedRecords({self._n:,} records, {format_bytes(self.nbytes)}{where})"
