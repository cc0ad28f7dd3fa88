"""The evidence of the loader's pace and start-up: input-bound, too many or idle workers, the loop's own bound,
pin_memory, dtypes, slow start, fork hazards, hotspots, thread workers, the probe's own gaps."""

# No `from __future__ import annotations` (as schema.py): string annotations cost import time in every process.
from typing import Any

from dlprobe.analysis.evidence.rows import InJob, WorkerRow, _MemoryReserve, _WorkerCpu


class InputBoundEvidence(InJob, _WorkerCpu, _MemoryReserve, total=False):
    busy: dict[str, Any] | None  # other programs held the cores while the loop ran: runq_share, used_cores
    wait_share: float
    steady_batches: int
    mean_wait_s: float
    median_wait_s: float
    p95_wait_s: float
    step_s: float
    load_per_batch_s: float
    num_workers: int | None  # null: the loader's settings could not be read
    workers_seen: int
    usable_cores: int
    suggested_num_workers: int
    suggested_changes: list[str]
    missing: list[str]  # settings the probe could not read, so no advice depends on them
    model_limits: dict[str, Any]
    model_limit: str | None  # memory | main | handover | cores | loop | cap (loader_model/rate.py, tune's)
    main_cpu_share: float | None  # the main process's CPU share over the steady windows; null: not read
    # the main process's time per steady batch taking it off the workers' result queue; null: not timed
    handover_ms_per_batch: float | None
    cores_left: float  # of the usable cores, what other work left to the loader (read from the workers' queueing)
    batches_per_s: float
    predicted_batches_per_s: float
    workers_that_fit_memory: int | None
    memory_for_workers_bytes: int | None
    projected_worker_bytes: int | None
    # head-of-line-bound: the workers' batch timings replayed in the loader's order (analysis/measures/head_of_line.py)
    head_of_line_share: float
    replayed_batches: int
    replayed_wait_s: float
    blocked_wait_s: float
    held_by_worker: dict[str, float]  # worker id (as text) -> its share of the blocked time
    batch_build_median_s: float
    batch_build_max_s: float
    slowest_batches: list[dict[str, Any]]  # worker, batch, build_s, first_index


class TooManyWorkersEvidence(InJob, _WorkerCpu, _MemoryReserve, total=False):
    num_workers: int | None
    usable_cores: int
    worker_uss_peak_bytes: int | None
    projected_worker_bytes: int | None
    memory_for_workers_bytes: int | None
    workers_that_fit_memory: int | None
    workers_that_fit_cores: int | None  # null: the workers' CPU was not read
    workers_that_fit: int
    workers: list[WorkerRow]
    loop_wait_share: float
    bound: str | None


class IdleWorkersEvidence(InJob, total=False):
    num_workers: int | None
    idle_worker_ids: list[int]
    epochs: list[int]
    worker_batches: list[int]
    iterable: bool | None
    world_size: int | None
    shards: int | None
    condition: str


class LoopBoundEvidence(InJob, total=False):
    wait_share: float
    mean_wait_s: float
    step_s: float
    steady_batches: int
    handover_ms_per_batch: float | None
    batch_build_s: float  # a worker's mean wall time building one batch, by its own clock
    num_workers: int | None
    suggested_num_workers: int
    surplus_workers: int
    worker_uss_mean_bytes: int
    surplus_bytes: int


class PinMemoryEvidence(InJob, total=False):
    pin_memory: bool | None
    pin_effective: bool | None
    cuda_initialized: bool | None
    batch_bytes: int | None


class DtypeWasteEvidence(InJob, total=False):
    batch_bytes: int | None
    saved_bytes_per_batch: int
    leaves: list[dict[str, Any]]
    batches: int
    saved_bytes_total: int


class IterableDuplicatesEvidence(InJob, total=False):
    num_workers: int | None
    epoch: int | None
    samples: int
    unique: int
    duplicates: int
    copies_per_sample: float
    dataset_len: int | None
    first_duplicate_at: int | None


class SlowStartEvidence(InJob, total=False):
    phases: dict[str, Any]
    hot_path: list[str]
    hot_function: str | None
    hot_calls_into: str | None
    hot_seconds: float | None
    hot_share: float | None
    file_system_s: float
    directory_walk: bool
    restart_per_epoch_s: float
    start_cost_s: float  # what the causes cost once per start (the script's own set-up, starting the workers)
    restarts_s: float  # the workers' restarts over the later epochs, in all
    run_s: float | None  # the run's length from the script's start, what the costs are weighed against
    busy: dict[str, Any] | None  # the machine was busy as the script started: runq_share or load_avg_1m, waited_share


class RemedyCostEvidence(InJob, total=False):
    remedy: str
    remedy_s: float
    remedies_s: dict[str, float]
    before_loader_s: float


class ForkHazardEvidence(InJob, total=False):
    epoch: int | None
    os_threads: int | None
    os_thread_names: dict[str, int] | None  # the process's threads counted by name
    python_threads: list[dict[str, Any]] | None  # name, daemon, state, frame of each Python thread
    torch_threads: int | None
    openmp: Any  # the OpenMP runtime as the probe saw it (None where not loaded)
    cuda_initialized: bool | None
    native_threads_since_import: int | None


class WorkerHotspotsEvidence(InJob, _WorkerCpu, total=False):
    samples: int
    categories: list[dict[str, Any]]
    top_functions: list[dict[str, Any]]
    probe_samples: int  # samples of the probe's own code while loading, left out of the shares
    loading_time: dict[str, Any]  # the workers' clocks per batch: fetch, collate, hand-over
    # the installed library holding half the loading samples or more (library, share, samples, called_from: the
    # user's frame that calls into it); None: the time is the script's own code's, or spread
    inside_library: dict[str, Any] | None


class ThreadWorkersEvidence(InJob, total=False):
    worker_method: str  # "thread": the workers are threads of the training process
    worker_threads: list[dict[str, Any]]  # per worker: worker_id, tids, batches, cpu_s, cpu_share, runq_share
    threads_cpu_share: float | None
    not_applicable: list[str]  # the findings that do not apply to thread workers


class ProbeDegradedEvidence(InJob, total=False):
    where: str  # the part of the probe or of the analysis that failed
    type: str | None  # the exception's type
    message: str | None
    raised_at: str  # file:line of dlprobe's own frame that raised
    missing: list[str]  # the findings (or parts of the report) it may lack
    consequence: str | None
    count: int
    pids: list[int]  # the probed processes where it failed (none: the supervisor's own failure)
    process: str  # "supervisor": dlprobe's own process, not a probed one
    status: str
    error: str | None
    events: int
    unreadable: list[dict[str, str]]
    processes: list[dict[str, Any]]  # memory not read: each process's pid, name and why
