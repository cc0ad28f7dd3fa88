"""Rows and parts the evidence of several codes shares: a rank, a worker's row, its projection, the batch it held,
the kernel's record, /dev/shm's numbers, the memory reserve, the workers' CPU."""

# No `from __future__ import annotations` (as schema.py): string annotations cost import time in every process.
from typing import Any, TypedDict

# Evidence is what a finding saw, so each code's keys are optional (total=False): a reading the probe could not get is
# left out or null, and a newer dlprobe may add keys. Rows inside lists that no output reads key by key stay dicts.


class LauncherFailure(TypedDict):
    """A failed rank as torchrun's ChildFailedError summary lists it (analysis/run/stderr_log.py)."""

    rank: int  # torchrun's global rank number (the launcher's own record, not a rank label)
    local_rank: int
    host: str
    exit_code: int
    pid: int
    signal: str | None
    error_file: str
    root_cause: bool


class RankEvidence(TypedDict):
    """In a job, one rank's own title and evidence of a finding merged across ranks."""

    rank: str
    pid: int
    title: str
    evidence: dict[str, Any]


class WaitingRank(TypedDict):
    """In a job's worker-hang: another rank, and the collective it waits in."""

    rank: str
    pid: int
    collective: str | None
    stack_seen: bool


class GrowthProjection(TypedDict, total=False):
    """One kind of a worker's growth projected to the epoch's end (loader_model.memory_growth.Projection)."""

    measured_bytes: int
    projected_bytes: int
    projected_low_bytes: int
    projected_high_bytes: int
    ceiling_bytes: int | None  # what the growth can be shown not to pass
    ceiling_source: str | None  # the parent's anonymous memory at fork, the cgroup limit, ...
    measured_at_epoch_fraction: float  # how far into the epoch the last reading was (1: the epoch ended)
    shape: str  # ended | few-readings | bending | straight | flat
    readings: int


class WorkerProjectionRow(TypedDict, total=False):
    """A worker's private memory projected to its epoch's end, by kind of page (memory_growth.WorkerProjection)."""

    held_at_start_bytes: int
    projected_bytes: int
    projected_low_bytes: int
    projected_high_bytes: int
    copies: GrowthProjection | None  # None: a run recorded without page kinds
    allocations: GrowthProjection


class WorkerRow(TypedDict, total=False):
    """A worker's memory in cow-growth, spawn-copy, mapped-pages and too-many-workers (bytes; growth over the run)."""

    pid: int
    worker_id: int | None
    counted: bool  # cow-growth: the worker's growth is above the floor that the finding counts
    loaded_at_start: bool
    uss_start_bytes: int | None
    uss_peak_bytes: int | None
    uss_growth_bytes: int | None
    pss_growth_bytes: int | None
    rss_growth_bytes: int | None
    rss_peak_bytes: int | None
    anon_growth_bytes: int | None
    cow_bytes: int | None
    private_dirty_growth_bytes: int | None
    pss_file_growth_bytes: int | None
    pss_shmem_growth_bytes: int | None
    projection: WorkerProjectionRow  # cow-growth: its growth projected to the end of the epoch


class InJob(TypedDict, total=False):
    """Keys any finding may gain in a job report (analysis/job/merge.py, job/findings.py)."""

    rank: str  # the rank label ("rank 1", "node 0 rank 1") of a finding seen on one rank
    rank_pid: int
    ranks: list[RankEvidence]  # a finding merged across ranks: each rank's own evidence
    launcher: LauncherFailure  # torchrun's summary names this finding's rank as failed
    after_rank: str  # script-error: raised after this rank had failed (most likely because of it)


class _Batch(TypedDict, total=False):
    """What a worker held when it failed or stalled (its in-flight slot)."""

    worker_id: int | None
    pid: int | None
    index: int | None
    batch_indices: list[int | None] | None
    position_in_batch: int | None
    phase: str | None  # fetch | collate
    index_kind: str | None  # map | iterable (a stream position)


class _Kernel(TypedDict, total=False):
    """A stuck process as /proc shows it (analysis/measures/stack_causes.py)."""

    state: str | None
    wchan: str | None
    syscall: str | None
    fd_target: str | None
    cpu_share: float | None
    threads: int | None
    threads_at_fork: list[str]
    native_library: str  # native-wait: the library whose native code the process waits in (stack_causes.native_wait)
    native_object: str  # its shared object: tokenizers.abi3.so
    native_function: str  # the innermost functions there, readable: rayon_core::latch::LockLatch::wait_and_reset


class _Shm(TypedDict, total=False):
    shm_total_bytes: int | None
    shm_peak_bytes: int | None
    batch_bytes: int | None
    num_workers: int | None
    prefetch_factor: int | None
    in_flight_estimate_bytes: int | None


class _MemoryReserve(TypedDict, total=False):
    """The memory kept free per worker when counting the workers that fit (analysis/measures/worker_reserve.py)."""

    memory_reserve: str  # measured (the bytes below) | flat (10% of the memory left for workers: nothing measured)
    reserve_per_worker_bytes: int | None  # null where flat
    worker_peak_spread_bytes: int | None  # max - min of the workers' USS peaks; null with fewer than two workers
    uncounted_per_worker_bytes: int | None  # the cgroup's charge per worker beyond its USS; null: not recorded


class _WorkerCpu(TypedDict, total=False):
    """The loader's workers' measured CPU (analysis/measures/worker_cpu.py:LoaderCpu.evidence)."""

    bound: str | None  # CPU-bound | I/O-bound | partly CPU-bound | hand-over-bound | consumer-bound; null: not measured
    worker_cpu_share: float
    worker_runq_share: float | None
    worker_wait_share: float
    worker_wall_s: float
    worker_fetch_share: float | None
    worker_times: list[dict[str, Any]]


class TriageEvidence(TypedDict, total=False):
    """What `dlprobe triage` adds to a finding read from a log (dlprobe/triage/): how sure the match is and, in a
    torchrun log, which rank it came from (a label, as a job's report names it) and how that was told."""

    confidence: str  # high | medium | low
    rank: str  # "rank 1"
    rank_from: str  # line prefix | torchrun root cause
    local_rank: int
    timeout_s: float | None  # DataLoader(timeout=...) as torch's message gives it
    occurrences: int  # lines of the log that say it
