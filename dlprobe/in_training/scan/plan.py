"""Inside the target: turns the script's DataLoader and the user's options into what to scan and how."""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dlprobe.scan.options import ScanOptions
from dlprobe.system.cpus import usable_cores


class ScanSetupError(Exception):
    """The scan cannot start or go on: reported as `error:` plus a hint, exit code 2."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass
class ScanPlan:
    dataset: Any
    dataset_type: str
    iterable: bool
    total: int | None  # len(dataset); None for a stream without a length
    indices: Sequence[int]  # map-style: the indices to check, ascending
    stream_start: int  # IterableDataset: positions [stream_start, stream_stop) are checked
    stream_stop: int | None
    shapes: bool  # whether the loader's collate needs equal shapes
    shape_note: str
    start_method: str
    context: Any
    workers: int
    base_seed: int
    worker_init_fn: Callable[[int], Any] | None
    timeout_s: float

    @property
    def selected(self) -> int | None:
        if not self.iterable:
            return len(self.indices)
        if self.stream_stop is not None:
            return self.stream_stop - self.stream_start
        return None if self.total is None else max(0, self.total - self.stream_start)


def dataset_type_of(dataset: Any) -> str:
    cls = type(dataset)
    return f"{cls.__module__}.{cls.__qualname__}"


def collate_needs_equal_shapes(loader: Any) -> tuple[bool, str]:
    """Only torch's default_collate batching more than one sample stacks tensors; a custom collate may pad."""
    if loader.batch_sampler is None:
        return False, "the loader does not batch samples (batch_size=None), so shapes are not compared"
    from torch.utils.data import default_collate  # lazily: the in-training side imports no torch at import time

    if loader.collate_fn is not default_collate:
        name = getattr(loader.collate_fn, "__qualname__", type(loader.collate_fn).__name__)
        return False, f"the loader's collate_fn {name} is its own, so shapes are not compared"
    if loader.batch_size == 1:
        return False, "batch_size=1 never stacks two samples, so shapes are not compared"
    return True, "default_collate stacks the samples of a batch, so their shapes must match"


def _length(dataset: Any, iterable: bool) -> int | None:
    try:
        return int(len(dataset))
    except Exception as exc:
        if iterable:
            return None  # a stream needs no length: it is read until it ends
        raise ScanSetupError(
            f"len(dataset) failed: {type(exc).__name__}: {exc}",
            hint=f"scan reads indices 0..len-1 of a map-style dataset; make {type(dataset).__qualname__}.__len__ work",
        ) from None


def _map_indices(total: int, options: ScanOptions, dataset_type: str) -> Sequence[int]:
    if total == 0:
        raise ScanSetupError(
            f"the dataset is empty: len() of {dataset_type} is 0",
            hint="check the paths, filters or split the script uses to find its data",
        )
    indices: Sequence[int] = range(total)[slice(options.start, options.stop)]
    if not indices:
        raise ScanSetupError(
            f"--range {options.range_text()} selects no index of a dataset with {total} samples",
            hint=f"pick a range within 0:{total}",
        )
    if options.sample is not None and options.sample < len(indices):
        indices = sorted(random.Random(options.seed).sample(indices, options.sample))
    return indices


def _stream_bounds(options: ScanOptions) -> tuple[int, int | None]:
    if options.sample is not None:
        raise ScanSetupError(
            "--sample needs random access, but the loader's dataset is an IterableDataset (a stream)",
            hint="use --range START:STOP to check part of the stream in order",
        )
    if (options.start or 0) < 0 or (options.stop or 0) < 0:
        raise ScanSetupError("--range cannot count from the end of a stream", hint="give positions from its start")
    return options.start or 0, options.stop


def start_method_for(loader: Any, options: ScanOptions) -> str:
    """The loader's own start method unless the user overrides it: the scan then meets what training meets."""
    if options.start_method != "auto":
        return options.start_method
    context = loader.multiprocessing_context
    if context is not None:
        return str(context.get_start_method())
    return multiprocessing.get_start_method()


def make_plan(loader: Any, options: ScanOptions) -> ScanPlan:
    import torch  # lazily: by now the target has imported torch anyway (it built the loader)
    from torch.utils.data import IterableDataset

    dataset = loader.dataset
    dataset_type = dataset_type_of(dataset)
    iterable = isinstance(dataset, IterableDataset)
    total = _length(dataset, iterable)
    if iterable:
        indices: Sequence[int] = range(0)
        stream_start, stream_stop = _stream_bounds(options)
        workers = 1  # a stream has one order; parallel readers would each need their own shard
    else:
        assert total is not None
        indices = _map_indices(total, options, dataset_type)
        stream_start, stream_stop = 0, None
        workers = max(1, min(options.workers or usable_cores(), len(indices)))
    shapes, shape_note = collate_needs_equal_shapes(loader)
    method = start_method_for(loader, options)
    base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
    return ScanPlan(
        dataset=dataset,
        dataset_type=dataset_type,
        iterable=iterable,
        total=total,
        indices=indices,
        stream_start=stream_start,
        stream_stop=stream_stop,
        shapes=shapes,
        shape_note=shape_note,
        start_method=method,
        context=multiprocessing.get_context(method),
        workers=workers,
        base_seed=base_seed,
        worker_init_fn=loader.worker_init_fn,
        timeout_s=options.sample_timeout_s,
    )
