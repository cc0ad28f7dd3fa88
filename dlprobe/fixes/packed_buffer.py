"""What `PackedRecords` and `PackedMapping` share: one uint8 buffer, this process's own or mapped from /dev/shm."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np


class PackedBuffer:
    """A read-only view over one packed uint8 array; subclasses say how to read it (`_attach`) and what to pack."""

    _packed: np.ndarray
    _key: str | None
    _cache_dir: str | None

    def _build(
        self, pack: Callable[[], np.ndarray], share: str | None, cache_dir: str | os.PathLike[str] | None
    ) -> None:
        """Pack here, or with `share` map the buffer the first process put in /dev/shm under that key (packing it
        only if this process is the first)."""
        self._key = share
        self._cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        if share is None:
            self._attach(pack())
            return
        from dlprobe.fixes.shm_cache import cached_array

        # signed: the buffer holds pickled records, so only one the user's own key signed is ever mapped
        self._attach(cached_array(share, pack, cache_dir=cache_dir, signed=True))

    def _attach(self, packed: np.ndarray) -> None:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes of the packed buffer."""
        return int(self._packed.nbytes)

    @property
    def key(self) -> str | None:
        """The /dev/shm cache key, or None when the buffer is this process's own memory."""
        return self._key

    def __sizeof__(self) -> int:
        # A private buffer is pickled into every spawn worker, so it counts; a shared one is only mapped.
        return object.__sizeof__(self) + (0 if self._key else self.nbytes)

    def __reduce__(self) -> tuple[Any, ...]:
        if self._key is not None:
            return (_attach_shared, (type(self), self._key, self._cache_dir))
        return (_from_packed, (type(self), np.asarray(self._packed)))


def _from_packed(cls: type[PackedBuffer], packed: np.ndarray) -> PackedBuffer:
    obj = cls.__new__(cls)
    obj._key, obj._cache_dir = None, None
    obj._attach(packed)
    return obj


def _attach_shared(cls: type[PackedBuffer], key: str, cache_dir: str | None) -> PackedBuffer:
    """Unpickling in a spawn worker: map the pages the parent already put in /dev/shm (checked and verified again
    here: the entry may have been replaced since the parent mapped it)."""
    from dlprobe.fixes.shm_cache import cached_array

    obj = cls.__new__(cls)
    obj._key, obj._cache_dir = key, cache_dir
    obj._attach(cached_array(key, None, cache_dir=cache_dir, signed=True))
    return obj
