"""The evidence of the failures: hangs, worker deaths and errors, the script's own end, descriptors, dropped
batches, shared handles, data that trains wrong, start failures."""

# No `from __future__ import annotations` (as schema.py): string annotations cost import time in every process.
from typing import Any, TypedDict

from dlprobe.analysis.evidence.rows import (
    InJob,
    WaitingRank,
    _Batch,
    _Kernel,
    _Shm,
)


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
    cgroup_limit_bytes: int | None  # null: no memory cgroup limit
    available_min_bytes: int
    seen_by: list[str]  # torch | fault-record | kernel-log: where the death is known from
    crash_frame: str | None  # the user's innermost frame in the worker's fatal-signal record


class BadSampleEvidence(InJob, _Batch, _Shm, total=False):
    stream_position: int | None  # an IterableDataset's: the position in the worker's stream (no index to check)
    cause: str  # exception | shm | no-shards
    exception: str
    error: str | None
    raised_in: str | None  # the innermost frame of the user's code: "function (file.py:line)"
    # The failing index loaded again alone (findings/deaths/sample_checks.py): fails | fails-any | loads | unverified.
    # Only "fails" blames the sample (bad-sample); the rest are worker-error: not the sample, or not known.
    sample_alone: str | None
    sample_check_reason: str | None  # unverified: why it was not loaded alone
    error_alone: str | None  # what it raised alone
    control_index: int | None  # an index the worker loaded fine, loaded after it in the same check
    control_loads: bool | None
    control_error: str | None
    failed_indices: list[int]  # every index the loader's workers failed on with this exception, this one first
    isolation: list[str] | None  # how the copy that loaded it again was sandboxed (in_training/sandbox.py)
    # collate failed and named no entry: the samples whose structure is unlike the rest's (sample_checks.py)
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
    pass  # a worker's error that is not the sample's: bad-sample's keys, read as not blaming it


class SamplerOutOfRangeEvidence(BadSampleEvidence, total=False):
    pass


class ShmExhaustedEvidence(WorkerKilledEvidence, BadSampleEvidence, total=False):
    pass


class GrewMost(TypedDict):
    """The process of a killed job whose USS rose the most, first reading to peak (analysis/findings/script.py)."""

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
    cgroup_limit_bytes: int | None  # null: no memory cgroup limit
    grew_most: GrewMost  # of the job's processes, the one whose private memory rose the most (32 MiB or more)
    # Workers' readings from the training process's death on are teardown, left out (analysis/run/teardown.py): when
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


class FdLeakRow(TypedDict, total=False):
    """One process whose open descriptors climbed (analysis/findings/descriptors.py)."""

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
    cause: str  # kept-batches | dataset-files | sockets | pipes | unknown (findings/descriptors.CAUSE_*)
    holder: str  # the role of the process that holds them: main | worker
    by_kind: dict[str, int]  # the targets read by kind, most first: torch-shm, file, socket, pipe, other
    targets_read: int | None  # how many were open when the targets were read (the kinds count of these)
    batches_received: int | None  # batches the main process's loop received (the main process only)
    tensors_per_batch: int | None  # tensors in its first batch: each one kept holds one descriptor
    fds_per_batch: float | None  # the rise per batch received
    workers_fds: list[dict[str, Any]]  # the main process's workers' counts: pid, worker_id, fds_min, fds_max
    ruled_out: list[str]  # what ruled each other cause out, in words


class BatchDroppedEvidence(InJob, total=False):
    error: (
        str | None
    )  # the first error the workers' queues dropped a batch with: "TypeError: h5py objects cannot be pickled"
    batch_numbers: list[int]  # the batch numbers dropped (torch's, in the epoch), the first 50 (schema 3: `batches`)
    count: int
    worker_ids: list[int]  # the workers whose queues dropped them (schema 3: `workers`)
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
    forced_method: str | None  # null: the run's record names none
    overridden: list[dict[str, Any]]  # {loader, script_choice}: the script's own multiprocessing_context, overridden
    not_applied: list[dict[str, Any]]  # {loader, reason}
