"""The shapes of events.jsonl's lines about the process and its loaders: the run's start and end, loaders,
epochs, batches, workers, errors and the sample check. Imported through rundir/schema.py."""

# No `from __future__ import annotations` (as in schema.py): string annotations compiled into ForwardRefs
# would triple the import's CPU time in every process that imports the schema.
from typing import Any, TypedDict


# --- record shapes -----------------------------------------------------------------------------------
class _EventKind(TypedDict):
    ev: str
    t: float


class Event(_EventKind, total=False):
    """The fields every line of events.jsonl has (its writer's pid in every run written since jobs were probed)."""

    pid: int


class StartEvent(Event, total=False):
    script: str  # the script, or the module with module=True (dlprobe run -m)
    argv: list[str]
    # True: a fork of a process that had loaded the probe (its heap shared with its parent's until written); False:
    # it began its own program (exec). Absent in runs recorded before it was.
    forked: bool
    python: str
    module: bool


class LauncherFailureEvent(Event, total=False):
    summary: str  # str(ChildFailedError): torchrun's failure summary (its end, at most STDERR_KEPT_BYTES)


class ScriptErrorEvent(Event, total=False):
    type: str
    message: str
    file: str | None
    line: int | None
    rank: int | None  # $RANK (or torch.distributed's) of the process that raised; None outside a distributed job
    node_rank: int | None


class StopEvent(Event, total=False):
    reason: str  # max_batches | max_seconds
    batches: int
    exiting: bool  # the hooks raised SystemExit in the main thread: the process is unwinding by itself


class ProcessEvent(Event, total=False):
    """EV_PROCESS: a probed process's identity; rank fields are None outside a distributed job."""

    ppid: int
    rank: int | None  # $RANK, or torch.distributed's rank once the process group is up
    local_rank: int | None  # $LOCAL_RANK
    world_size: int | None  # $WORLD_SIZE
    node_rank: int | None  # $GROUP_RANK (torchrun) or $NODE_RANK (Lightning)
    host: str
    argv: list[str]


class Suspect(TypedDict, total=False):
    """A dataset attribute holding many Python objects (in_training/dataset_inspect.py): copy-on-access suspect."""

    attribute: str
    type: str
    items: int
    objects: int
    est_bytes: int
    item: str  # the type of the first value of an object array or Series (which remedy fits: numbers or strings)
    columns: list[dict[str, Any]]  # a DataFrame's columns: name, dtype, python_objects, arrow, objects, est_bytes, item


class DatasetSummary(TypedDict, total=False):
    type: str
    len: int | None
    iterable: bool
    est_bytes: int
    suspects: list[Suspect]


class LoaderEvent(Event, total=False):
    """The loader's config (num_workers, batch_size, dataset summary, ...) or why it could not be read."""

    loader: int
    num_workers: int
    batch_size: int | None
    start_method: str | None
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    worker_method: str | None  # torch's setting ("multiprocessing", "thread"); None where torch has none
    timeout: float
    drop_last: bool
    collate_fn: str
    custom_batch_sampler: bool
    sampler: str | None  # the index sampler's class (module.Qualname); None for an IterableDataset's
    batch_sampler: str | None  # the batch sampler's class (torch's BatchSampler unless the script passed its own)
    created_t: float | None
    dataset: DatasetSummary
    inspect_error: str


class _WorkerIds(TypedDict):
    pid: int
    worker_id: int


class WorkerStart(_WorkerIds, total=False):
    """One worker an epoch started, with the hooks' memory reading of it right after it started."""

    memory: dict[str, int] | None


class WorkerReading(TypedDict, total=False):
    """EV_WORKERS_LAST: one worker's memory as the epoch's last batch arrived, or as torch stopped it mid-epoch."""

    pid: int
    memory: dict[str, int] | None


class ThreadWorker(TypedDict):
    """A worker that is a thread of the event's process (torch's worker_method="thread"): its native thread id."""

    worker_id: int
    tid: int


class StartMethodEvent(Event, total=False):
    """EV_START_METHOD: the start method the loader's workers were made with, once its first iterator started them."""

    loader: int
    start_method: str


class StartMethodForcedEvent(Event, total=False):
    """EV_START_METHOD_FORCED: --start-method on one loader: the method asked for, the script's own choice (its
    multiprocessing_context's method; None: it named none and got the default, `default`), and whether it applied."""

    loader: int
    forced: str
    script_choice: str | None
    default: str | None
    applied: bool
    reason: str  # why it was not applied (this torch has no thread workers, the loader has no workers)


class WorkerStartFailedEvent(Event, total=False):
    """EV_WORKER_START_FAILED: a loader's workers failed to start. `kind` WORKER_START_UNPICKLABLE: `path` the
    attribute pickle refused (dataset.transform), `object_type`, `reason`; WORKER_START_MAIN_GUARD (written by the
    worker re-running the script): `file` and `line` where the script's top level iterates the loader."""

    loader: int
    start_method: str | None
    kind: str
    error: str  # the exception's type and message as raised
    path: str | None
    object_type: str | None
    reason: str | None
    file: str | None
    line: int | None


class EpochEvent(Event, total=False):
    loader: int
    epoch: int
    iter_s: float
    workers: list[WorkerStart] | None  # None with num_workers=0, and with thread workers
    worker_method: str  # "thread" where the workers are threads of the event's process; absent for processes
    threads: list[ThreadWorker] | None  # the worker threads a new iterator started; None when it reused them


class BatchesEvent(Event, total=False):
    loader: int
    epoch: int
    waits: list[float]
    total: int
    worker_batches: list[int]  # batches each worker (by worker id) delivered this epoch so far; absent: not known
    # seconds the main process spent taking each of these batches off the workers' result queue (receiving and
    # unpickling: each tensor's shared memory), alongside `waits`; absent: not timed (no worker processes)
    handovers: list[float]
    # Folded chunks (past WAITS_KEPT_PER_STRIDE): `waits`/`handovers` hold every stride-th batch's only, and these the
    # whole chunk's: batches, summed and longest wait, summed handovers (absent where not every batch was timed).
    stride: int
    n: int
    wait_s: float
    wait_max: float
    handover_s: float


class WorkerBatchesEvent(Event, total=False):
    """EV_WORKER_BATCHES: rows [task, start - t0, fetch_s, collate_s, first index, fetch_cpu_s, collate_cpu_s,
    queued_s] (task: the batch's number in the iterator's order, -1 when unknown; first index: the sampler's first
    index or the stream position; *_cpu_s: the fetching thread's CPU time in the fetch and in the collate; queued_s:
    its time runnable but waiting for a core since the previous batch's end, -1 when unknown). Runs written before
    these three have the first five only."""

    loader: int
    worker: int
    t0: float
    rows: list[list[float]]
    stride: int  # 1, then 2, 4, ... once the worker has kept WORKER_BATCH_CAP rows, 2 x that, ...
    tid: int  # a thread worker's native thread id (its events carry the training process's pid)


class EpochEndEvent(Event, total=False):
    loader: int
    epoch: int
    batches: int
    worker_batches: list[int]


class WorkersLastEvent(Event, total=False):
    loader: int
    epoch: int
    workers: list[WorkerReading] | None  # None with num_workers=0


class WorkerStartEvent(Event, total=False):
    loader: int
    worker_id: int
    pid: int
    memory: dict[str, int] | None


class WorkerGcEvent(Event, total=False):
    """EV_WORKER_GC: `collections` [[start, stop], ...] (wall-clock seconds) of the worker's full garbage collections
    since its last such event, the first WORKER_GC_KEPT of its life at most."""

    loader: int
    worker: int
    pid: int
    collections: list[list[float]]


class WorkerRng(TypedDict, total=False):
    """One random generator a worker's dataset holds (in_training/rng_streams.py); states are 16-hex fingerprints."""

    attribute: str  # its path from the dataset: self.rng, self.transform.rng
    owner: str  # its class: numpy.random._generator.Generator, random.Random, torch._C.Generator
    parent: str | None  # its state in the main process as the workers forked
    start: str | None  # as this worker started, after the script's worker_init_fn (None: not found there)
    after: str | None  # after the worker's first batch
    replaced: bool  # the attribute held another object after the first batch: the dataset made its own


class WorkerRngEvent(Event, total=False):
    """EV_WORKER_RNG: one worker's random generators, after its first batch."""

    loader: int
    epoch: int
    worker_id: int
    rngs: list[WorkerRng]


class WorkerAttrsEvent(Event, total=False):
    """EV_WORKER_ATTRS: `attrs` {path from the dataset (self.cache): items} in one worker process; `phase` "start"
    (as it started, before the script's worker_init_fn), "tick" (a count changed) or "end" (its normal exit);
    `batches` the batches it had fetched by then."""

    loader: int
    worker_id: int
    phase: str
    batches: int
    attrs: dict[str, int]


class SampleOrderEvent(Event, total=False):
    """EV_SAMPLE_ORDER: the order of the indices the sampler gave in one complete epoch."""

    loader: int
    epoch: int
    digest: str  # a running hash of every index in order (16 hex digits); equal digests: the same order
    batches: int  # the index batches hashed
    samples: int  # the indices hashed
    sampler: str | None  # the class that shuffles (the DistributedSampler when there is one)
    shuffle: bool | None  # whether it shuffles (None: not known)
    sampler_epoch: int | None  # a DistributedSampler's `epoch` as this epoch's order was made (set_epoch sets it)


class BatchSendErrorEvent(Event, total=False):
    loader: int
    worker_id: int
    pid: int
    task: int | None  # torch's batch number in the epoch, where the dropped item was torch's (number, batch)
    type: str  # the exception's type: TypeError, OSError
    message: str  # its message, cut to MAX_SEND_ERROR_CHARS
    batch_bytes: int  # the dropped batch's tensors' own bytes (in_training/batch_info.py)
    storage_bytes: int  # ... and their storages' (each once): what sharing it needed in /dev/shm


class BatchInfoEvent(Event, total=False):
    loader: int
    epoch: int
    bytes: int  # the tensors' own bytes (numel x element size)
    # The bytes of their storages, each counted once: what sharing the batch puts in /dev/shm (a view of a larger
    # tensor sends its whole storage). Absent in runs recorded before dlprobe read it.
    storage_bytes: int
    leaves: list[dict[str, Any]]


class LoaderErrorEvent(Event, total=False):
    loader: int
    type: str
    message: str


class SampleCheckEvent(Event, total=False):
    """EV_SAMPLE_CHECK: the index a worker failed on, loaded again alone (in_training/sample_check.py)."""

    loader: int
    epoch: int
    worker_id: int
    exception: str  # the type the worker raised
    index: int | None
    length: int | None  # len(dataset) when it was checked
    control_index: int | None  # an index loaded after it when it failed alone
    outcome: str  # SAMPLE_CHECK_*
    reason: str  # unverified: why
    error_alone: str  # fails: the first line of what it raised alone
    error_type_alone: str
    control_loads: bool
    control_error: str
    seconds: float
    isolation: list[str]  # how the child was kept from the training's world (in_training/sandbox.py)
    batch_indices: list[int]  # collate failed: the batch compared (SAMPLE_CHECK_ODD / SAMPLE_CHECK_ALIKE)
    common_signature: str | None  # the structure most of its samples have
    common_count: int
    odd: list[dict[str, Any]]  # [{"index", "signature"}] of the samples unlike the rest
    odd_count: int
    undecided: bool  # two structures, as many samples each: which is odd is not known
    compared: int


class ProbeErrorEvent(Event, total=False):
    """EV_PROBE_ERROR: a probe part (`where`) failed; what the report lacks because of it (`consequence`)."""

    where: str
    type: str
    message: str
    consequence: str
    count: int


class DupesEvent(Event, total=False):
    loader: int
    epoch: int
    samples: int
    unique: int
    duplicates: int
    digests: list[str]
