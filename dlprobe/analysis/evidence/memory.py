"""The evidence of memory and shared memory: copy-on-write and allocation growth, collections' copies, spawn's
copy, the start method, /dev/shm pressure."""

# No `from __future__ import annotations` (as schema.py): string annotations cost import time in every process.
from typing import Any, TypedDict

from dlprobe.analysis.evidence.rows import (
    InJob,
    WorkerRow,
)


class _CowCost(TypedDict, total=False):
    counted_workers: int
    worker_floor_bytes: int
    total_bytes: int
    epoch_fraction: float
    projected_total_bytes: int
    projected_low_total_bytes: int  # the range the readings allow, every counted worker together
    projected_high_total_bytes: int
    measured_at_epoch_fraction: float  # the earliest of the workers' last readings, as a share of the epoch
    copies_ceiling_bytes: int | None  # what a worker's copies can be shown not to pass
    copies_ceiling_source: str | None
    other_ranks_bytes: int
    limit_bytes: int | None
    limit_kind: str | None
    parent_bytes: int | None


class GrowingAttribute(TypedDict, total=False):
    """A dataset attribute that grew inside the workers (analysis/measures/attr_growth.py), counted in each worker."""

    attribute: str  # its path from the dataset: self.cache
    workers: int  # workers whose counts were read
    grown_workers: int  # of them, those where it grew by attr_growth.ATTR_MIN_ITEMS or more
    start_items_min: int  # its items at those workers' start (0: absent or empty)
    start_items_max: int
    end_items_min: int  # at their last reading
    end_items_max: int
    grown_items: int  # its growth, those workers together
    samples_fetched: int | None  # their batches times the batch size
    items_per_sample: float | None
    epochs: int  # the epochs those workers served
    fate: str | None  # attr_growth.FATES: thrown_away, ends_with_epoch, kept; None: the run does not show


class BatchViews(TypedDict):
    """What a loader's first batch holds against what sharing it sends (analysis/measures/batch_sent.py)."""

    batch_bytes: int
    sent_bytes: int
    storage_ratio: float


class CowGrowthEvidence(InJob, _CowCost, total=False):
    workers: list[WorkerRow]
    suspects: list[dict[str, Any]]
    start_method: str | None
    num_workers: int | None
    projected_per_worker_bytes: int | None
    gc_at_fork: dict[str, Any] | None
    variant: str  # which story the finding tells (findings/memory.COW_*)
    growing_attributes: list[GrowingAttribute]  # the allocation story's attributes that grew, the largest first
    batch_views: BatchViews  # the allocation story's batches are views of larger storages (none of its attributes grew)
    teardown_from_s: float
    teardown_pid: int
    teardown_readings: int


class GcCopyRow(TypedDict, total=False):
    """One worker's step at its first full garbage collection (analysis/findings/gc_copy.py)."""

    worker_id: int | None
    pid: int
    bytes: int  # the worker's rise over the readings the collection ran between
    between_s: list[float]  # the readings around it, seconds since the run started
    collection_s: float | None  # how long the collection took, timed in the worker


class GcCopyEvidence(InJob, total=False):
    gc_steps: list[GcCopyRow]  # each worker's step at its first full collection (schema 3: `workers`)
    total_bytes: int
    largest_bytes: int
    start_method: str | None
    gc_at_fork: dict[str, Any] | None


class MappedPagesEvidence(InJob, total=False):
    workers: list[WorkerRow]


class SpawnCopyEvidence(InJob, total=False):
    start_method: str | None
    num_workers: int | None
    dataset_est_bytes: int | None
    total_copied_bytes: int
    workers: list[WorkerRow]
    largest_attributes: list[dict[str, Any]]


class StartMethodEvidence(InJob, total=False):
    start_method: str | None
    method_chosen: bool  # the script or the loader chose it; False: the interpreter's default
    num_workers: int | None
    blockers: list[dict[str, Any]]  # what stops forkserver and spawn workers: what, attribute, kind, reason
    pickled_bytes: int | None
    predicted: dict[str, dict[str, Any]]  # per method: copy_bytes (each worker's copy up front), start_s
    measured: dict[str, Any]  # the method in use: start_s, worker_starts, cow_bytes or uss_start_bytes
    main_script: dict[str, Any]  # the guard and the top-level time (in_training/start_readiness.py:main_script)


class ShmPressureEvidence(InJob, total=False):
    shm_total_bytes: int | None
    shm_start_bytes: int | None
    shm_peak_bytes: int | None
    in_flight_estimate_bytes: int | None  # at the bytes each batch sends (its storages', where larger)
    loaders: list[
        dict[str, Any]
    ]  # loader_id, num_workers, prefetch_factor, batch_bytes, sent_bytes, storage_ratio, ...
    views: bool  # a loader's batches are views of storages VIEW_RATIO times their own bytes or more
