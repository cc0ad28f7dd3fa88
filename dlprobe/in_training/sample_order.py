"""The order of the indices a loader's sampler gives, one running hash per epoch: a loader whose shuffling sampler
gives the same order every epoch (a DistributedSampler whose set_epoch is never called) is told by equal hashes.

Read in the training process where every index passes on its way to the workers (or the loop's own fetch): the
iterator's `_next_index`, wrapped once on torch's iterator classes. What the sampler yields is handed on unchanged;
the cost is one tuple and one hash per batch of indices (about a microsecond for a batch of 64)."""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

_MASK = (1 << 64) - 1


class _Order:
    __slots__ = ("batches", "digest", "facts", "samples", "source")

    def __init__(self, source: Any) -> None:
        self.source = source  # the iterator over the sampler this order is of (a new one each epoch)
        self.digest: int | None = 0  # None: an index that does not hash by value
        self.batches = 0
        self.samples = 0
        self.facts: dict[str, Any] = {}


_orders: weakref.WeakKeyDictionary[Any, _Order] = weakref.WeakKeyDictionary()


def _state(iterator: Any) -> _Order:
    source = getattr(iterator, "_sampler_iter", None)
    order = _orders.get(iterator)
    if order is None or order.source is not source:
        order = _orders[iterator] = _Order(source)
    return order


def wrap_next_index(original: Any) -> Any:
    """An iterator's _next_index: the sampler's next index (batch), added to its epoch's running hash."""

    @functools.wraps(original)
    def _next_index(self: Any) -> Any:
        index = original(self)  # StopIteration ends the epoch's order as it ends the epoch
        try:
            order = _state(self)
            if order.digest is not None:
                if type(index) is list:
                    order.digest = hash((order.digest, tuple(index)))
                    order.samples += len(index)
                else:
                    order.digest = hash((order.digest, index))
                    order.samples += 1
                order.batches += 1
        except TypeError:  # an index that does not hash (a list inside the batch): no order for this epoch
            _orders[self].digest = None
        except Exception:  # noqa: S110 - never break the loop for a hash: the epoch's order is simply not recorded
            pass
        return index

    _next_index._dlprobe_wrapper = True  # type: ignore[attr-defined]
    return _next_index


def _find_distributed(loader: Any) -> Any:
    """The loader's DistributedSampler (or its batch sampler's), known by what it does: a shuffle flag, an epoch
    and set_epoch."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    for candidate in (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
        if (
            candidate is not None
            and callable(getattr(candidate, "set_epoch", None))
            and isinstance(getattr(candidate, "epoch", None), int)
            and isinstance(getattr(candidate, "shuffle", None), bool)
        ):
            return candidate
    return None


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ in ("__main__", "builtins") else f"{cls.__module__}.{cls.__qualname__}"


def sampler_facts(loader: Any) -> dict[str, Any]:
    """What shuffles the loader's indices: its class, whether it shuffles, and a DistributedSampler's `epoch`."""
    distributed = _find_distributed(loader)
    if distributed is not None:
        return {"sampler": _class_name(distributed), "shuffle": distributed.shuffle, "sampler_epoch": distributed.epoch}
    sampler = getattr(loader, "sampler", None)
    data = sys.modules.get("torch.utils.data")
    shuffle = None
    if data is not None and sampler is not None:
        if isinstance(sampler, data.RandomSampler):
            shuffle = True
        elif isinstance(sampler, data.SequentialSampler):
            shuffle = False
    return {"sampler": _class_name(sampler) if sampler is not None else None, "shuffle": shuffle, "sampler_epoch": None}


def begin(iterator: Any, loader: Any) -> None:
    """An epoch's iterator is ready (its first indices may already be hashed): note what gave them."""
    _state(iterator).facts = sampler_facts(loader)


def take(iterator: Any) -> dict[str, Any] | None:
    """The fields of an EV_SAMPLE_ORDER event for the epoch the iterator just ended, or None."""
    order = _orders.get(iterator) if iterator is not None else None
    if order is None or order.digest is None or not order.batches:
        return None
    _orders.pop(iterator, None)
    return {"digest": f"{order.digest & _MASK:016x}", "batches": order.batches, "samples": order.samples,
            **order.facts}  # fmt: skip
