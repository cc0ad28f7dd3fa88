"""The evidence of `dlprobe attach`'s outside view and of a job's cross-rank findings."""

# No `from __future__ import annotations` (as schema.py): string annotations cost import time in every process.
from typing import Any, TypedDict

from dlprobe.analysis.evidence.rows import (
    InJob,
    LauncherFailure,
    _Kernel,
)


class AttachedStuckEvidence(InJob, _Kernel, total=False):
    window_s: float | None
    cpu_s: dict[str, float | None]
    frames: dict[str, Any] | None
    stack_problem: dict[str, Any] | None  # why py-spy gave no stacks: kind, error, advice
    pid: int | None
    cause: str
    stuck_frame: str | None
    user_frames: list[str]


class AttachedMemoryGrowthEvidence(InJob, total=False):
    growing: list[dict[str, Any]]
    bytes_per_s_total: float
    limit: str  # the tightest limit's name
    limit_bytes: int | None
    headroom_bytes: int
    eta_s: float
    # the worker memory figure and budget, as input-bound and too-many-workers give them (loader_model/worker_memory)
    projected_worker_bytes: int | None
    memory_for_workers_bytes: int | None
    workers_that_fit_memory: int | None


class AttachedWorkersGoneEvidence(InJob, total=False):
    gone: list[dict[str, Any]]
    kernel_log_lines: list[str | None]  # the kernel's OOM-kill lines
    main_gone_after_s: float | None
    started: list[int]


class AttachedOutsideViewEvidence(InJob, total=False):
    rerun: str | None  # the `dlprobe run` command that would see what only the hooks see
    window_s: float | None
    shm_used_bytes: int
    shm_total_bytes: int | None
    # attached-no-stacks: why py-spy read no stack (missing | permission | failed), its error and what to do
    kind: str
    error: str | None
    advice: str


class NodeOversubscribedEvidence(InJob, total=False):
    rank_count: int
    num_workers_per_rank: dict[str, int]
    worker_processes: int
    usable_cores: int
    workers_per_rank_fit_cores: int
    workers_per_rank_fit_memory: int | None
    worker_projected_bytes: int | None
    node_pss_peak_bytes: int | None
    memory_limit_bytes: int | None
    memory_limit_kind: str | None


class UnevenRanksEvidence(InJob, total=False):
    batches_per_epoch: dict[str, int]
    short_ranks: dict[str, int]


class RankDuplicatesEvidence(InJob, total=False):
    pairs: list[dict[str, Any]]


class RankFailedEvidence(InJob, total=False):
    other_failures: list[LauncherFailure]


class RankWait(TypedDict, total=False):
    """One rank's steady data waits for a loader (analysis/job/straggler.py)."""

    rank: str  # "node K rank R"
    steady_batches: int
    median_wait_s: float
    mean_wait_s: float
    num_workers: int | None
    supply_s_per_batch: float  # the loader's time per batch: its workers' median build time over their number


class StragglerRankEvidence(InJob, total=False):
    straggler: str  # "node K rank R" of the rank that holds the others back
    rank_waits: list[RankWait]
    others_median_wait_s: float  # the median of the other ranks' steady waits, pooled
    wait_spread_s: float  # the robust spread (scaled MAD) the threshold is counted in
    threshold_s: float  # how far above the others' median the straggler's median had to be
    others_supply_s_per_batch: float  # the median of the other ranks' supply times (RankWait.supply_s_per_batch)
    supply_threshold_s: float  # how far above that the straggler's supply time had to be
    slowest_by_epoch: list[str]  # the slowest rank in each epoch every rank ran far enough
    slowness_follows: str  # stays (the rank or its node), moves (the data), unknown (one epoch)
    worker_bound: str | None  # the straggler's workers: CPU-bound, I/O-bound, ...; null: not measured
