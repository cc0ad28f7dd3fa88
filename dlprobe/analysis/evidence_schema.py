"""The evidence of each finding code in report.json: one TypedDict per code, and `Evidence`, every key of every code
with its one meaning (mypy refuses a key that two codes would type differently)."""

# No `from __future__ import annotations` here: a TypedDict's string annotations are each compiled into a ForwardRef
# when the class is made, which made importing this module about 25 ms more of CPU in every process that imports it.
from typing import Any, TypedDict

# Evidence is what a finding saw, so each code's keys are optional (total=False): a reading the probe could not get is
# left out or null, and a newer dlprobe may add keys. Rows inside lists that no output reads key by key stay dicts.


class LauncherFailure(TypedDict):
    """A failed rank as torchrun's ChildFailedError summary lists it (analysis/stderr_log.py)."""

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
    """Keys any finding may gain in a job report (analysis/job_merge.py, job_findings.py)."""

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
    """A stuck process as /proc shows it (analysis/stack_causes.py)."""

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
    """The memory kept free per worker when counting the workers that fit (analysis/worker_reserve.py)."""

    memory_reserve: str  # measured (the bytes below) | flat (10% of the memory left for workers: nothing measured)
    reserve_per_worker_bytes: int | None  # null where flat
    worker_peak_spread_bytes: int | None  # max - min of the workers' USS peaks; null with fewer than two workers
    uncounted_per_worker_bytes: int | None  # the cgroup's charge per worker beyond its USS; null: not recorded


class _WorkerCpu(TypedDict, total=False):
    """The loader's workers' measured CPU (analysis/worker_cpu.py:LoaderCpu.evidence)."""

    bound: str | None  # CPU-bound | I/O-bound | partly CPU-bound | hand-over-bound | consumer-bound; null: not measured
    worker_cpu_share: float
    worker_runq_share: float | None
    worker_wait_share: float
    worker_wall_s: float
    worker_fetch_share: float | None
    worker_times: list[dict[str, Any]]


class WorkerHangEvidence(InJob, _Batch, _Kernel, total=False):
    cause: str
    stuck_s: float | None
    waited_s: float | None
    stuck_frame: str | None
    user_frames: list[str]
    stack_tool: str | None
    stack: list[str]
    hang_record: str
    also_stuck: list[dict[str, Any]]
    batch: int  # batch-lost: the batch (torch's task number in the epoch) the worker made and the loop never got
    made_s_before: float  # batch-lost: how long before the hang record the worker finished it
    send_error: str | None  # batch-lost: "TypeError: h5py objects cannot be pickled", as the worker's queue dropped it
    tid: int  # a worker thread (worker_method "thread"): "pid" is then its thread id, in this process
    process_pid: int | None
    waiting_ranks: list[WaitingRank]


class MainHangEvidence(WorkerHangEvidence, total=False):
    pass


class WorkerKilledEvidence(InJob, _Batch, _Shm, total=False):
    pids: list[int]
    cause: str  # oom | external-kill | bus | segfault | abort | fpe | sigill | signal | exit | unknown
    signal: str | None
    exit_code: int | None
    message: str | None
    last_rss_bytes: int | None
    peak_rss_bytes: int | None
    last_uss_bytes: int | None
    peak_uss_bytes: int | None
    last_pss_bytes: int | None
    peak_pss_bytes: int | None
    kernel_log: str | None  # the kernel's OOM-kill line for this pid
    cgroup_oom_kills: int
    cgroup_peak_bytes: int
    cgroup_limit_bytes: int
    available_min_bytes: int
    seen_by: list[str]  # torch | fault-record | kernel-log: where the death is known from
    crash_frame: str | None  # the user's innermost frame in the worker's fatal-signal record


class BadSampleEvidence(InJob, _Batch, _Shm, total=False):
    cause: str  # exception | shm | no-shards
    exception: str
    error: str | None
    raised_in: str | None  # the innermost frame of the user's code: "function (file.py:line)"
    # The failing index loaded again alone (analysis/sample_checks.py): fails | fails-any | loads | unverified.
    # Only "fails" blames the sample (bad-sample); the rest are worker-error: not the sample, or not known.
    sample_alone: str | None
    sample_check_reason: str | None  # unverified: why it was not loaded alone
    error_alone: str | None  # what it raised alone
    control_index: int | None  # an index the worker loaded fine, loaded after it in the same check
    control_loads: bool | None
    control_error: str | None
    failed_indices: list[int]  # every index the loader's workers failed on with this exception, this one first
    isolation: list[str] | None  # how the copy that loaded it again was sandboxed (in_training/sandbox.py)
    # collate failed and named no entry: the samples whose structure is unlike the rest's (analysis/sample_checks.py)
    odd_indices: list[int]
    odd_signature: str | None  # the first odd sample's structure: "Tensor(1, 16, 16) float32"
    common_signature: str | None  # what the other samples of the batch have
    script_stopped_at: str | None  # the script's own error was this exception, re-raised here (file.py:line)
    sampler: str | None  # sampler-out-of-range: the class that yielded the index
    dataset_len: int | None
    collate_entry: int
    entry_0_index: int | None
    entry_0: str | None
    entry_k: str | None


class TooFewShardsEvidence(BadSampleEvidence, total=False):
    pass


class WorkerErrorEvidence(BadSampleEvidence, total=False):
    stream_position: int | None  # an IterableDataset's: the position in the worker's stream (no index to check)


class SamplerOutOfRangeEvidence(BadSampleEvidence, total=False):
    pass


class ShmExhaustedEvidence(WorkerKilledEvidence, BadSampleEvidence, total=False):
    pass


class GrewMost(TypedDict):
    """The process of a killed job whose USS rose the most, first reading to peak (analysis/run_findings.py)."""

    pid: int
    role: str  # main | worker
    worker_id: int | None
    uss_growth_bytes: int
    uss_peak_bytes: int | None


class ScriptKilledEvidence(InJob, total=False):
    pid: int | None
    cause: str  # oom | external-kill | bus | segfault | abort | fpe | sigill | signal | exit | unknown
    signal: str | None
    exit_code: int | None
    kernel_log: str | None  # the kernel's OOM-kill line for this pid
    cgroup_limit_bytes: int
    grew_most: GrewMost  # of the job's processes, the one whose private memory rose the most (32 MiB or more)
    # Workers' readings from the training process's death on are teardown, left out (analysis/teardown.py): when
    # (seconds into the run), the pid that died, how many readings.
    teardown_from_s: float
    teardown_pid: int
    teardown_readings: int


class ScriptErrorEvidence(InJob, total=False):
    type: str | None
    message: str | None
    file: str | None
    line: int | None
    raised_at_s: float | None  # seconds into the run
    pid: int | None


class NoLoaderEvidence(InJob, total=False):
    exit_code: int | None
    own_options: list[str]  # dlprobe run's own options written after the script, which the script got instead


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
    """A dataset attribute that grew inside the workers (analysis/attr_growth.py), counted in each worker."""

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
    """What a loader's first batch holds against what sharing it sends (analysis/batch_sent.py)."""

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
    variant: str  # which story the finding tells (memory_findings.COW_*)
    growing_attributes: list[GrowingAttribute]  # the allocation story's attributes that grew, the largest first
    batch_views: BatchViews  # the allocation story's batches are views of larger storages (none of its attributes grew)
    teardown_from_s: float
    teardown_pid: int
    teardown_readings: int


class GcCopyRow(TypedDict, total=False):
    """One worker's step at its first full garbage collection (analysis/gc_copy_findings.py)."""

    worker_id: int | None
    pid: int
    bytes: int  # the worker's rise over the readings the collection ran between
    between_s: list[float]  # the readings around it, seconds since the run started
    collection_s: float | None  # how long the collection took, timed in the worker


class GcCopyEvidence(InJob, total=False):
    workers: list[GcCopyRow]
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
    # head-of-line-bound: the workers' batch timings replayed in the loader's order (analysis/head_of_line.py)
    head_of_line_share: float
    replayed_batches: int
    replayed_wait_s: float
    blocked_wait_s: float
    held_by_worker: dict[str, float]  # worker id (as text) -> its share of the blocked time
    batch_build_median_s: float
    batch_build_max_s: float
    slowest_batches: list[dict[str, Any]]  # worker, batch, build_s, first_index


class TooManyWorkersEvidence(InJob, _MemoryReserve, total=False):
    num_workers: int | None
    usable_cores: int
    worker_uss_peak_bytes: int | None
    projected_worker_bytes: int | None
    memory_for_workers_bytes: int | None
    workers_that_fit_memory: int | None
    workers_that_fit_cores: int
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
    """One rank's steady data waits for a loader (analysis/job_straggler.py)."""

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


class FdLeakRow(TypedDict, total=False):
    """One process whose open descriptors climbed (analysis/fd_findings.py)."""

    pid: int
    role: str
    worker_id: int | None
    fds_first: int
    fds_last: int
    fds_peak: int
    seconds: float
    fds_per_s: float
    fd_limit: int | None
    fds_first_inherited: bool  # fds_first is its parent's count at the fork: the worker was first read later
    seconds_to_limit: float | None
    fd_targets: list[dict[str, Any]]  # {target: a path pattern or socket/pipe, count}, most first
    fd_targets_at: int | None  # the count when the targets were read


class FdLeakEvidence(InJob, total=False):
    leaking: list[FdLeakRow]
    hit_limit_pids: list[int]
    error: str | None
    opened_at: str | None  # the user's frame of the worker's `Too many open files`: where it opens them
    # The differential (the fastest climbing process's): the cause its descriptors' kinds and holder name, and why
    cause: str  # kept-batches | dataset-files | sockets | pipes | unknown (fd_findings.CAUSE_*)
    holder: str  # the role of the process that holds them: main | worker
    by_kind: dict[str, int]  # the targets read by kind, most first: torch-shm, file, socket, pipe, other
    targets_read: int | None  # how many were open when the targets were read (the kinds count of these)
    batches_received: int | None  # batches the main process's loop received (the main process only)
    tensors_per_batch: int | None  # tensors in its first batch: each one kept holds one descriptor
    fds_per_batch: float | None  # the rise per batch received
    workers_fds: list[dict[str, Any]]  # the main process's workers' counts: pid, worker_id, fds_min, fds_max
    ruled_out: list[str]  # what ruled each other cause out, in words


class BatchDroppedEvidence(InJob, total=False):
    error: str  # the first error the workers' queues dropped a batch with: "TypeError: h5py objects cannot be pickled"
    batches: list[int]  # the batch numbers dropped (torch's, in the epoch), the first 50
    count: int
    workers: list[int]
    pids: list[int]
    other_errors: list[str]
    # Where the error is /dev/shm's (no room to share the batch): views (the batches' storages much larger than their
    # tensors) or shm-full; with the batch's own bytes and what it sends (its storages')
    cause: str
    batch_bytes: int | None
    sent_bytes: int | None


class SharedHandleEvidence(InJob, total=False):
    handles: list[dict[str, Any]]  # fd, target, kind, pos, access, attribute, owner (rundir.schema.ForkHandle)
    attributes: list[str]
    libraries: list[str]
    num_workers: int | None
    error_type: str | None  # a worker's error tied to the handles (an I/O error, or one naming them)
    tied_by: str | None  # why it is tied
    tied_index: int | None  # the index the tied worker failed on ...
    tied_index_alone: str | None  # ... and what it did loaded alone (sample_check outcome: loads, fails-any, ...)
    mapped: list[dict[str, Any]]  # data files the parent had mapped as the workers forked (path, size, attribute)


class SharedRngEvidence(InJob, total=False):
    """shared-rng: a generator the dataset holds, followed into the workers (in_training/rng_streams.py)."""

    attribute: str  # its path from the dataset: self.rng
    rng_class: str  # numpy.random.Generator, random.Random, torch.Generator
    num_workers: int | None
    persistent_workers: bool
    shared_starts: int  # worker starts (a worker in an epoch) that began at one same state
    worker_starts: int  # worker starts recorded for this attribute
    distinct_starts: int  # the distinct states they began at
    worker_ids: list[int]  # the workers among the shared starts
    epochs: list[int]  # the epochs among them
    drew_same: int  # of the shared starts, those at one same state again after their first batch
    as_forked: bool  # every shared start held the state the main process had as the workers started


class SameOrderEvidence(InJob, total=False):
    """same-order-every-epoch: the sampler's order, one hash per complete epoch (in_training/sample_order.py)."""

    sampler: str | None  # the class that shuffles (also sampler-out-of-range's: the class that yielded the index)
    epochs: list[int]  # the epochs that had the one order
    epochs_seen: int  # the complete epochs whose order was recorded
    samples: int  # indices per epoch
    sampler_epochs: list[int | None]  # the DistributedSampler's `epoch` as each of those epochs began
    set_epoch_missing: bool  # the DistributedSampler's epoch was the same in each: set_epoch is the cause
    digest: str  # the order's hash


class WorkerStartFailedEvidence(InJob, total=False):
    failure: str  # unpicklable | main-guard (rundir.schema.WORKER_START_*)
    start_method: str | None
    attribute_path: str | None  # unpicklable: what pickle refused, from the worker's arguments (dataset.transform)
    object_type: str | None
    pickle_reason: str | None
    error: str | None
    file: str | None  # main-guard: the script's top-level line that started workers inside a worker
    line: int | None
    pids: list[int]  # main-guard: the workers that died so


class StartMethodForcedEvidence(InJob, total=False):
    forced_method: str
    overridden: list[dict[str, Any]]  # {loader, script_choice}: the script's own multiprocessing_context, overridden
    not_applied: list[dict[str, Any]]  # {loader, reason}


EVIDENCE_BY_CODE: dict[str, type] = {
    "worker-hang": WorkerHangEvidence,
    "main-hang": MainHangEvidence,
    "worker-killed": WorkerKilledEvidence,
    "bad-sample": BadSampleEvidence,
    "worker-error": WorkerErrorEvidence,
    "sampler-out-of-range": SamplerOutOfRangeEvidence,
    "too-few-shards": TooFewShardsEvidence,
    "shm-exhausted": ShmExhaustedEvidence,
    "script-error": ScriptErrorEvidence,
    "script-killed": ScriptKilledEvidence,
    "no-loader": NoLoaderEvidence,
    "cow-growth": CowGrowthEvidence,
    "gc-copy": GcCopyEvidence,
    "mapped-pages": MappedPagesEvidence,
    "spawn-copy": SpawnCopyEvidence,
    "start-method": StartMethodEvidence,
    "shm-pressure": ShmPressureEvidence,
    "input-bound": InputBoundEvidence,
    "too-many-workers": TooManyWorkersEvidence,
    "idle-workers": IdleWorkersEvidence,
    "loop-bound": LoopBoundEvidence,
    "pin-memory": PinMemoryEvidence,
    "dtype-waste": DtypeWasteEvidence,
    "iterable-duplicates": IterableDuplicatesEvidence,
    "shared-rng": SharedRngEvidence,
    "same-order-every-epoch": SameOrderEvidence,
    "slow-start": SlowStartEvidence,
    "remedy-cost": RemedyCostEvidence,
    "fork-hazard": ForkHazardEvidence,
    "worker-hotspots": WorkerHotspotsEvidence,
    "probe-degraded": ProbeDegradedEvidence,
    "attached-worker-stuck": AttachedStuckEvidence,
    "attached-loop-stuck": AttachedStuckEvidence,
    "attached-memory-growth": AttachedMemoryGrowthEvidence,
    "attached-workers-gone": AttachedWorkersGoneEvidence,
    "attached-no-stacks": AttachedOutsideViewEvidence,
    "attached-shm-full": AttachedOutsideViewEvidence,
    "attached-outside-view": AttachedOutsideViewEvidence,
    "node-oversubscribed": NodeOversubscribedEvidence,
    "uneven-ranks": UnevenRanksEvidence,
    "rank-duplicates": RankDuplicatesEvidence,
    "rank-failed": RankFailedEvidence,
    "straggler-rank": StragglerRankEvidence,
    "thread-workers": ThreadWorkersEvidence,
    "fd-leak": FdLeakEvidence,
    "batch-dropped": BatchDroppedEvidence,
    "shared-handle": SharedHandleEvidence,
    "worker-start-failed": WorkerStartFailedEvidence,
    "start-method-forced": StartMethodForcedEvidence,
}


class Evidence(  # every key of every code, each with its one type: what render/ and check/ read through
    WorkerHangEvidence,
    WorkerKilledEvidence,
    ShmExhaustedEvidence,
    ScriptErrorEvidence,
    ScriptKilledEvidence,
    NoLoaderEvidence,
    CowGrowthEvidence,
    SpawnCopyEvidence,
    StartMethodEvidence,
    ShmPressureEvidence,
    InputBoundEvidence,
    TooManyWorkersEvidence,
    IdleWorkersEvidence,
    LoopBoundEvidence,
    PinMemoryEvidence,
    DtypeWasteEvidence,
    IterableDuplicatesEvidence,
    SharedRngEvidence,
    SameOrderEvidence,
    SlowStartEvidence,
    RemedyCostEvidence,
    ForkHazardEvidence,
    WorkerHotspotsEvidence,
    ProbeDegradedEvidence,
    AttachedStuckEvidence,
    AttachedMemoryGrowthEvidence,
    AttachedWorkersGoneEvidence,
    AttachedOutsideViewEvidence,
    NodeOversubscribedEvidence,
    UnevenRanksEvidence,
    RankDuplicatesEvidence,
    RankFailedEvidence,
    StragglerRankEvidence,
    ThreadWorkersEvidence,
    FdLeakEvidence,
    SharedHandleEvidence,
    WorkerStartFailedEvidence,
    StartMethodForcedEvidence,
    total=False,
):
    pass


# The numbers the terminal shows by default under a finding's title (render/terminal.py; the rest of the evidence is
# under --verbose, in report.json and on the page): those that say how bad it is. A code not named here shows its
# first two scalar entries.
KEY_EVIDENCE: dict[str, tuple[str, ...]] = {
    "worker-hang": ("cause", "waited_s", "stuck_frame"),
    "batch-dropped": ("count", "workers"),
    "main-hang": ("cause", "waited_s", "stuck_frame"),
    "worker-killed": ("cause", "signal", "index", "peak_rss_bytes"),
    "bad-sample": ("index", "exception", "raised_in"),
    "shm-exhausted": ("shm_total_bytes", "in_flight_estimate_bytes", "num_workers"),
    "script-error": ("type", "raised_at_s"),
    "script-killed": ("cause", "signal", "cgroup_limit_bytes"),
    "cow-growth": ("total_bytes", "projected_total_bytes", "limit_bytes"),
    "spawn-copy": ("num_workers", "total_copied_bytes"),
    "gc-copy": ("total_bytes", "largest_bytes"),
    "start-method": ("start_method", "method_chosen", "num_workers"),
    "shm-pressure": ("shm_total_bytes", "shm_peak_bytes", "in_flight_estimate_bytes"),
    "input-bound": ("wait_share", "num_workers", "suggested_num_workers"),
    "too-many-workers": ("num_workers", "workers_that_fit", "projected_worker_bytes", "memory_for_workers_bytes"),
    "idle-workers": ("num_workers", "idle_worker_ids"),
    "loop-bound": ("wait_share", "num_workers", "suggested_num_workers"),
    "dtype-waste": ("batch_bytes", "saved_bytes_per_batch"),
    "iterable-duplicates": ("samples", "unique", "duplicates"),
    "shared-rng": ("attribute", "rng_class", "shared_starts"),
    "same-order-every-epoch": ("sampler", "epochs", "set_epoch_missing"),
    "slow-start": ("start_cost_s", "run_s", "hot_function"),
    "worker-start-failed": ("failure", "attribute_path", "file", "line"),
    "start-method-forced": ("forced_method",),
    "remedy-cost": ("remedy", "remedy_s"),
    "fork-hazard": ("os_threads", "native_threads_since_import"),
    "probe-degraded": ("where", "missing"),
    "attached-memory-growth": ("bytes_per_s_total", "limit_bytes", "eta_s"),
    "straggler-rank": ("others_median_wait_s", "slowness_follows", "worker_bound"),
}
