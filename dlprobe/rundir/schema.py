"""The run-directory contract: every file name, cross-process env var, event kind and record shape, defined once.

Both sides import from here: the writer (in_training, running inside the user's script) and the readers
(supervisor, analysis, commands). This module imports nothing heavy, so the target can import it cheaply.
"""

# No `from __future__ import annotations` here: a TypedDict's string annotations are each compiled into a ForwardRef
# when the class is made, which made importing this module 18 ms instead of 7 of CPU in every process that imports it.
from typing import Any, TypedDict

# Bump when a reader of an older dlprobe would misread a run written by this one. Runs without the field
# were written before it existed and are version 1.
RUN_SCHEMA_VERSION = 2
LEGACY_RUN_SCHEMA_VERSION = 1

# --- files and folders of a run directory -------------------------------------------------------------
META_FILE = "meta.json"
EVENTS_FILE = "events.jsonl"
SAMPLES_FILE = "samples.jsonl"
RESULT_FILE = "result.json"
REPORT_FILE = "report.json"
PLOT_FILE = "memory.png"
REPORT_HTML_FILE = "report.html"  # the self-contained page (render/html.py, its timeline analysis/report/timeline.py)
TRACE_FILE = "trace.json"  # Trace Event Format for Perfetto / chrome://tracing (analysis/report/trace.py)
# `dlprobe run` draws the plot in a detached process (commands/plot_process.py) that writes here and renames, so a
# reader never sees half a PNG; a failure to draw is written down instead of lost with the process's stderr.
PLOT_PARTIAL_FILE = "memory.png.partial"
PLOT_ERROR_FILE = "memory.png.error.txt"
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
KERNEL_FILE = "kernel.json"
CHECK_FILE = "check.json"
STACKS_FILE = "stacks.txt"  # py-spy's raw (collapsed) format: one line per distinct stack, with its count
STACKS_META_FILE = "stacks.json"
STACKS_SPEEDSCOPE_FILE = "stacks.speedscope.json"  # stacks.txt for speedscope.app (analysis/report/speedscope.py)
PY_SPY_LOG_FILE = "py-spy.log"
HANGS_DIR = "hangs"
INFLIGHT_DIR = "inflight"
STACKS_DIR = "stacks"  # stack dumps: py-spy JSON and the targets' own faulthandler output
# Every process of the target appends here when signalled; the supervisor signals one process at a time.
FAULTHANDLER_FILE = "faulthandler.txt"
# `dlprobe tune` writes these in its own root directory, next to the trial runs.
TUNE_RESULT_FILE = "tune.json"
TUNE_PLOT_FILE = "tune.png"
# `dlprobe attach`: what it saw of a job it did not start (the tree, each process's CPU time and stack at the end).
ATTACH_FILE = "attach.json"

HANG_RECORD_GLOB = "hang-*.json"


def hang_record_name(number: int) -> str:
    """hangs/hang-N.json: the supervisor's record of its Nth hang dump."""
    return f"hang-{number}.json"


def hang_stack_name(number: int, pid: int) -> str:
    """stacks/hangN-PID.json: py-spy's raw dump of one process during hang N."""
    return f"hang{number}-{pid}.json"


INFLIGHT_SLOT_SUFFIX = ".bin"
# Each DataLoader worker's fatal-signal record (faulthandler's text, written by the worker's own signal handler as it
# dies of SIGSEGV, SIGBUS, SIGFPE, SIGABRT or SIGILL): how a worker died, whatever error torch raised for it.
FAULTS_DIR = "faults"
FAULT_RECORD_SUFFIX = ".txt"


def fault_record_name(pid: int) -> str:
    """faults/PID.txt: one worker's fatal-signal record; empty (or removed at its clean exit) if it did not crash."""
    return f"{pid}{FAULT_RECORD_SUFFIX}"


def inflight_slot_name(pid: int) -> str:
    """inflight/PID.bin: one process's in-flight slot (layout in rundir/inflight_format.py)."""
    return f"{pid}{INFLIGHT_SLOT_SUFFIX}"


# Every name above, for tests and tools that list what a run directory may hold.
RUN_DIR_NAMES = (
    META_FILE,
    EVENTS_FILE,
    SAMPLES_FILE,
    RESULT_FILE,
    REPORT_FILE,
    PLOT_FILE,
    REPORT_HTML_FILE,
    TRACE_FILE,
    PLOT_PARTIAL_FILE,
    PLOT_ERROR_FILE,
    STDOUT_FILE,
    STDERR_FILE,
    KERNEL_FILE,
    CHECK_FILE,
    STACKS_FILE,
    STACKS_META_FILE,
    STACKS_SPEEDSCOPE_FILE,
    PY_SPY_LOG_FILE,
    HANGS_DIR,
    INFLIGHT_DIR,
    FAULTS_DIR,
    STACKS_DIR,
    FAULTHANDLER_FILE,
    TUNE_RESULT_FILE,
    TUNE_PLOT_FILE,
    ATTACH_FILE,
)

# --- environment variables the supervisor sets for the target --------------------------------------------
RUN_DIR_ENV = "DLPROBE_RUN_DIR"
TAKEOVER_ENV = "DLPROBE_TAKEOVER"  # module:function that takes over the loader instead of the training loop
TAKEOVER_LOADER_ENV = "DLPROBE_TAKEOVER_LOADER"
# Steps of the script's own training loop to time before the take-over (tune: the loop's own step bounds the job)
TAKEOVER_STEPS_ENV = "DLPROBE_TAKEOVER_STEPS"
STOP_AFTER_BATCHES_ENV = "DLPROBE_STOP_AFTER_BATCHES"
STOP_AT_ENV = "DLPROBE_STOP_AT"  # a wall-clock deadline (time.time()), shared with the supervisor's clock
TUNE_CONFIG_ENV = "DLPROBE_TUNE_CONFIG"
EXIT_NO_BATCHES = 3  # a tune trial's exit code when its loader gave no batch
SCAN_OPTIONS_ENV = "DLPROBE_SCAN_OPTIONS"
NO_STARTUP_PROFILE_ENV = "DLPROBE_NO_STARTUP_PROFILE"
# Where the dlprobe package lives, for the sitecustomize injected on PYTHONPATH: a command may run a python that has
# dlprobe on no path of its own (another venv, `python -I` aside); the hook appends this only if its import fails.
PACKAGE_PATH_ENV = "DLPROBE_PACKAGE_PATH"
# "SUPERVISOR_PID:LAUNCH:NAME", read by the injected sitecustomize: the Python process whose parent is that supervisor
# is the target `dlprobe run` started (python SCRIPT, python -m NAME, or a command's first Python process), probed
# from its first line without a frame of dlprobe's on its stack (in_training/target.py).
TARGET_ENV = "DLPROBE_TARGET"
# `dlprobe run --start-method M`: every DataLoader with workers starts them with M (as its multiprocessing_context,
# set by the hooks as each loader is iterated; "thread": worker_method="thread" where the installed torch has it).
START_METHOD_ENV = "DLPROBE_START_METHOD"
# --no-isolated-checks: no copy of the training is forked for dlprobe's own checks (in_training/quiet_fork.py)
NO_ISOLATED_CHECKS_ENV = "DLPROBE_NO_ISOLATED_CHECKS"
# /proc/PID/comm of the processes dlprobe forks from the training for its own checks (the readiness copy, the sample
# check's checker and its sandboxed child): ps and top show them, the supervisor waits for the checker by it
CHECK_PROCESS_NAME = "dlprobe-check"
START_METHOD_CHOICES = ("fork", "forkserver", "spawn", "thread")
# stderr.log keeps at most this much of what the run wrote to stderr (its end): the page's tail and torchrun's
# summary are read from the end (analysis/run/stderr_log.py).
STDERR_KEPT_BYTES = 1 << 20
STDERR_HEAD_BYTES = 64 << 10  # of those, the run's first bytes (the first error), where it wrote more

# --- events.jsonl: the "ev" field of each line ----------------------------------------------------------
EV_START = "start"
EV_SCRIPT_ERROR = "script_error"
# torchrun's ChildFailedError summary, recorded by the launcher process itself as it ends (in_training/target.py)
EV_LAUNCHER_FAILURE = "launcher_failure"
EV_STOP = "stop"
EV_LOADER = "loader"
EV_LOADER_ERROR = "loader_error"
# A worker's exception reached the loop: the index it failed on, loaded again alone in a forked child
# (in_training/sample_check.py), and what happened. Outcomes:
SAMPLE_CHECK_FAILS = "fails"  # fails alone (and a control index it loaded just before loads, where there was one)
SAMPLE_CHECK_FAILS_ANY = "fails-any"  # fails alone, and so does the control index, with the same error: not the sample
SAMPLE_CHECK_LOADS = "loads"  # loads alone: not the sample
SAMPLE_CHECK_UNVERIFIED = "unverified"  # not loaded alone (`reason` says why)
# collate failed on a batch: its samples loaded one by one and compared by structure (in_training/batch_compare.py)
SAMPLE_CHECK_ODD = "odd"  # some samples' structure is unlike the rest's (`odd`, `common_signature`)
SAMPLE_CHECK_ALIKE = "alike"  # every sample has the same structure: not a shape or type mismatch
EV_SAMPLE_CHECK = "sample_check"
EV_START_METHOD = "start_method"
# --start-method applied to one loader (or not: `applied` false and `reason`), with the script's own choice
EV_START_METHOD_FORCED = "start_method_forced"
# A loader's workers could not start under spawn or forkserver: what the dataset holds that pickle refuses, or the
# script that starts workers while a worker re-runs it (no `if __name__ == "__main__":` guard)
EV_WORKER_START_FAILED = "worker_start_failed"
WORKER_START_UNPICKLABLE = "unpicklable"
WORKER_START_MAIN_GUARD = "main-guard"
EV_EPOCH = "epoch"
EV_BATCHES = "batches"
EV_EPOCH_END = "epoch_end"
# The workers' memory read by the main process when the epoch's last batch arrives, just before torch shuts them
# down: the end of their copy-on-write growth, which the supervisor's sampling can miss by up to a round.
EV_WORKERS_LAST = "workers_last"
# A worker's own memory as it starts, before the user's worker_init_fn: a load there (np.load of a table) can be done
# before the main process's reading of it right after iter() on a busy machine, and growth is measured from here.
EV_WORKER_START = "worker_start"
# A worker process's full (oldest-generation) garbage collections, timed (in_training/worker_gc.py): the first after
# a fork touches every object the worker inherited, which copies their pages, a one-time step of its memory.
EV_WORKER_GC = "worker_gc"
WORKER_GC_KEPT = 2  # a worker's full collections timed at most: the first is the one that copies
# A batch a worker's queue could not send (in_training/send_errors.py): CPython's queue thread failed to pickle it,
# printed the error on the worker's stderr and dropped it; the training loop waits for it forever.
EV_BATCH_SEND_ERROR = "batch_send_error"
# One DataLoader worker's batches, in chunks (in_training/worker_batches.py): when each fetch began, how long its
# samples and its collate took. Capped per worker: past the cap only every `stride`-th fetch is kept.
EV_WORKER_BATCHES = "worker_batches"
WORKER_BATCH_CAP = 5000  # rows a worker keeps at each stride before the stride doubles
# The loop's waits a loader keeps at each stride before the stride doubles (then every 2nd, 4th, ... batch's wait is
# kept, and each `batches` event adds its chunk's exact count and sums): a loader's waits stay log-bounded.
WAITS_KEPT_PER_STRIDE = 50_000
FOLDED_FLUSH_S = 2.0  # a loader whose waits are folded sends a chunk every 2 s, not every 0.25 s
EV_BATCH_INFO = "batch_info"
EV_DUPES = "dupes"
EV_FORK_STATE = "fork_state"
EV_FORK_HANDLES = "fork_handles"  # descriptors objects of the dataset hold as a loader forks (in_training/fork_handles)
# A worker's random generators held on its dataset (in_training/rng_streams.py): each one's state as the main process
# forked it, as the worker started (after worker_init_fn) and after the worker's first batch.
EV_WORKER_RNG = "worker_rng"
# How many items the dataset's data attributes hold inside one worker (in_training/worker_attrs.py): at its start,
# when a count changed (at most every second, then less often), and at its end.
EV_WORKER_ATTRS = "worker_attrs"
WORKER_ATTRS_MAX = 32  # attributes counted per worker at most
# The order of the indices a loader's sampler gave in one complete epoch, one running hash (in_training/sample_order.py)
EV_SAMPLE_ORDER = "sample_order"
EV_START_READINESS = "start_readiness"  # what the other start methods would make of a loader (start_readiness.py)
# the readiness check was not run for a loader: `reason` (a fork the script would see, a memory limit too close)
EV_START_READINESS_SKIPPED = "start_readiness_skipped"
EV_ACCEL = "accel"
EV_STARTUP_PROFILE = "startup_profile"
EV_TAKEOVER = "takeover"
EV_TUNE_LOADER = "tune_loader"
EV_TUNE_LOOP = "tune_loop"  # the script's loop timed, written at exit where it stopped before the take-over
EV_TRIAL_START = "trial_start"
EV_TRIAL_END = "trial_end"
EV_TRIAL_SKIPPED = "trial_skipped"
# The pick and the best measured once more before tune recommends (keys, their first rates, the tolerance)
EV_TUNE_CONFIRM = "tune_confirm"
EV_TUNE_WORKERS_STOP = "tune_workers_stop"  # why tune tried no more worker counts (reason, top: the highest planned)
EV_SCAN_START = "scan_start"
EV_SCAN_PROGRESS = "scan_progress"
EV_SCAN_BAD = "scan_bad"
EV_SCAN_ERROR = "scan_error"
EV_SCAN_SKIPPED = "scan_skipped"  # a loader found alive that cannot be scanned; the scan goes on
EV_SCAN_END = "scan_end"
EV_PROBE_ERROR = "probe_error"  # the probe's own failure inside the training process (rate-limited)
# Who a probed process is (pid, rank, local rank, world size, node, host): written by every process that builds a
# DataLoader, before its first "loader" event, and again whenever its identity changes (Lightning's rank 0
# learns its rank only when it joins the process group). Loaders are keyed by (writer pid, loader id);
# the rank is how they are shown. A single-script run writes one, with the ranks null.
EV_PROCESS = "process"

# --- samples.jsonl: the "k" field of each line -----------------------------------------------------------
SAMPLE_PROC = "proc"  # a process seen for the first time
SAMPLE_READING = "s"  # one round of readings (per process and for the system)
SAMPLE_GONE = "gone"  # a process ended
SAMPLE_UNREAD = "unread"  # a process whose memory (smaps_rollup) could not be read: pid, t, error (once per process)
SAMPLE_THREAD = "thread"  # a worker thread (worker_method="thread") seen for the first time: pid, tid, comm
SAMPLE_FD_TARGETS = "fdt"  # what a process's descriptors point to, read when its count climbed: pid, t, n, top,
# nofile (its RLIMIT_NOFILE read again then)
# Fields of a process's reading besides its memory (rss, uss, ... in bytes): CPU seconds it has used (utime+stime,
# /proc/PID/stat) and seconds it has waited for a core (/proc/PID/schedstat), both cumulative since it started;
# absent where they could not be read (runs recorded before dlprobe read them too).
SAMPLE_CPU = "cpu"
SAMPLE_RUN_DELAY = "runq"
SAMPLE_FDS = "fd"  # open file descriptors (len of /proc/PID/fd), read every few ticks

# --- meta.json: how the target was started -----------------------------------------------------------------
LAUNCH_SCRIPT = "script"  # dlprobe run train.py ARGS
LAUNCH_MODULE = "module"  # dlprobe run -m pkg.mod ARGS
LAUNCH_COMMAND = "command"  # dlprobe run -- torchrun ... / bash train.sh / python -m ...: hooks via the environment

# --- result.json: why dlprobe itself ended the run --------------------------------------------------------
STOP_REASON_HANG = "hang"  # the hang guard stopped it (--on-hang stop)


# --- stacks.json: how the hotspot sampler (`py-spy record`) fared -------------------------------------------
SAMPLER_OK = "ok"
SAMPLER_OFF = "off"  # turned off on purpose (DLPROBE_STACK_RATE=0, or DLPROBE_PY_SPY set empty)
SAMPLER_MISSING = "missing"  # no py-spy found (none installed, or DLPROBE_PY_SPY names no executable)
SAMPLER_FAILED = "failed"  # py-spy could not start, or exited with an error and saved no stacks
SAMPLER_ENDED = "ended"  # the script had ended before py-spy attached: nothing to sample, not a failure


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


class ForkThread(TypedDict, total=False):
    name: str
    daemon: bool
    state: str  # running | waiting | uses-lock | unknown
    frame: str


class ForkBaseline(TypedDict, total=False):
    os_threads: int
    python_threads: int


class ForkStateEvent(Event, total=False):
    """EV_FORK_STATE: threads, OpenMP and CUDA just before a loader forks its workers (in_training/runtime_state)."""

    loader: int
    epoch: int
    os_threads: int
    os_thread_names: dict[str, int]
    python_threads: list[ForkThread]
    baseline: ForkBaseline | None
    torch_threads: int
    openmp: bool
    cuda_initialized: bool | None


class ForkHandle(TypedDict, total=False):
    fd: int
    target: str  # the file's path, or socket:[inode]
    kind: str  # file | socket
    pos: int  # the offset every worker shares
    access: str  # r | w | rw
    attribute: str  # the path from the dataset to the object holding it: self.h5, self.dataset.env
    owner: str  # the object's module and class: h5py._hl.files.File, lmdb.Environment
    held_by: str  # how the object was tied to it: fileno | name | path (a path the dataset names, no fileno)
    via: str  # a socket found deep under `attribute` (a session's pooled connection): the path to it
    via_owner: str  # the class of the object that holds it there: ssl.SSLSocket, socket.socket


class ForkMapping(TypedDict, total=False):
    path: str  # a data file (not a library) mapped into the parent as the workers fork
    kib: int  # mapped, all its mappings together
    shared: bool  # MAP_SHARED somewhere (writes reach the file and every worker)
    writable: bool
    attribute: str  # the object holding it, where one names the file (np.memmap's filename, an Arrow table's path)
    owner: str


class PickleCheck(TypedDict, total=False):
    """One object torch hands each worker under forkserver and spawn, pickled into a counting sink."""

    name: str  # dataset | collate_fn | worker_init_fn
    picklable: bool | None  # None: not known (the check stopped at its bound: `skipped` says which)
    pickled_bytes: int | None
    skipped: str
    pickled_at_least: int  # where skipped: the bytes counted before the bound
    attribute: str  # where it fails: self.transform, self.env
    kind: str  # lambda | local-function | local-class | handle | lock | thread | other
    reason: str
    error: str
    tensors: int
    tensor_bytes: int
    buffer_bytes: int  # large arrays counted by their length, not pickled by the check
    not_run: list[str]  # classes of the user's own code whose __reduce__/__getstate__ the probe did not call


class MainScript(TypedDict, total=False):
    """`__main__` as a forkserver or spawn worker would run it again."""

    file: str | None
    guarded: bool | None  # the loader is iterated inside `if __name__ == "__main__":`; None: not known
    iter_line: int | None
    guard_lines: list[list[int]]
    top_level_imports_s: float  # the top level's imports outside the guard (every such worker repeats them)
    top_level_work_s: float  # the top level's other work outside the guard
    guarded_s: float
    imports_s: float  # every import before the loader (a worker imports what its objects need again)
    guarded_cpu_s: float  # the main thread's CPU inside the guard (a worker does not run it)
    redo_cpu_s: float  # the main thread's CPU until the loop, less guarded_cpu_s: what a spawn worker runs again


class ForkserverState(TypedDict, total=False):
    """What a fork server would have ready for the loader's workers (in_training/start_readiness.forkserver_state)."""

    running: bool  # already started by this process: no server start to wait for
    preload: list[str]  # the modules it imports once (multiprocessing.set_forkserver_preload)
    preloads_main: bool  # `__main__` among them and really imported there (CPython 3.14, 3.13.8: gh-126631)


class StartReadinessSkippedEvent(Event, total=False):
    """EV_START_READINESS_SKIPPED: a loader's readiness was not checked, and why (in_training/quiet_fork.py)."""

    loader: int
    reason: str


class StartReadinessEvent(Event, total=False):
    """EV_START_READINESS: a loader's objects and script as forkserver and spawn would hand them to each worker."""

    loader: int
    start_method: str
    chosen: bool  # the script (or the loader) chose the method; False: the interpreter's default
    num_workers: int
    persistent_workers: bool
    objects: list[PickleCheck]
    picklable: bool | None
    pickled_bytes: int | None
    pickle_s: float
    pickle_cpu_s: float  # the check's CPU for the in-band pickle (the parent pickles each worker's copy again)
    buffer_bytes: int  # large arrays counted by length (the parent copies them into each worker's pickle)
    copy_bytes: int  # the memory a worker's unpickled copy takes (estimated)
    copy_truncated: bool
    size_s: float
    tensors: int
    tensor_bytes: int
    cpus: int
    cpu_share: float | None  # of its runnable time so far, the share the process ran (the rest: waiting for a core)
    load: float  # the 1-minute load average then
    main: MainScript
    forkserver: ForkserverState
    share_now: float  # the share of a core a CPU-bound process got over the main thread's last seconds and the check
    share_now_runnable_s: float  # the runnable time share_now was read over


class ForkHandlesEvent(Event, total=False):
    """EV_FORK_HANDLES: the files and sockets objects of the dataset hold as a loader forks its workers."""

    loader: int
    epoch: int
    fds: int | None
    handles: list[ForkHandle]
    mapped: list[ForkMapping]
    pools: list[dict[str, Any]]  # attribute, owner, threads (names), count: live threads the dataset's objects hold


class ProfileStack(TypedDict, total=False):
    phase: str  # before_loader | ...
    seconds: float
    frames: list[list[Any]]  # [file, function, line], outermost first


class StartupProfileEvent(Event, total=False):
    """EV_STARTUP_PROFILE: where the script's time went before its first batch (in_training/startup_profile.py)."""

    reason: str
    started: float
    stopped: float
    loader_created: float
    samples: int
    sampled_s: float
    truncated_s: float
    stacks: list[ProfileStack]


class AccelEvent(Event, total=False):
    loader: int
    pin_effective: bool | None
    cuda_initialized: bool | None


class TakeoverEvent(Event, total=False):
    """EV_TAKEOVER: the loop's loader handed to scan's or tune's function instead of training (in_training/hooks.py)."""

    loader: int
    function: str  # module:function


class TuneLoopEvent(Event, total=False):
    """EV_TUNE_LOOP: the script's own loop timed (in_training/loop_clock.py summary), written at exit where it stopped
    before the take-over."""

    loader: int
    loop_steps: int
    loop_step_s: float | None  # None: fewer steps than a steady one needs
    loop_cpu_share: float | None


class TuneLoaderEvent(Event, total=False):
    """EV_TUNE_LOADER: what tune's trials keep of the script's loader (in_training/tune_trials.py describe)."""

    accelerator: bool
    loop: dict[str, Any]  # the script's loop as timed (TuneLoopEvent's fields), {} where not timed
    iterable: bool
    custom_batch_sampler: bool
    custom_collate_fn: bool
    batch_size: int | None
    batches_per_epoch: int | None  # None: the loader has no length
    dataset_len: int | None
    start_method: str | None
    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    notes: list[str]


class TrialSpecFields(TypedDict, total=False):
    """One trial's configuration (tune/plan.py trial) and why the search chose it: every trial event carries it."""

    key: str  # w<num_workers>-p<prefetch_factor>-<pin|nopin>
    num_workers: int
    prefetch_factor: int | None  # None without workers
    pin_memory: bool
    stage: str  # workers | prefetch | pin
    predicted_samples_per_s: float | None  # the search's prediction before the trial ran
    search_reason: str | None  # None where no search step chose it (a trial measured again, a later stage)


class TrialResultFields(TrialSpecFields, total=False):
    """A trial's measurement (in_training/tune_trials.py measure and _workers_now): EV_TRIAL_END's fields, and the
    first of a tune.json trial row's (tune/records.py TrialRow)."""

    status: str  # ok | too-slow | hung | crashed | oom | duplicates | skipped
    error: str | None
    loader_id: int | None
    batches: int
    samples: int
    first_batch_s: float | None
    samples_per_s: float | None
    measured_batches: int
    passes: int
    settled: bool
    shutdown_s: float
    trial_s: float
    worker_busy_share: float | None
    worker_cpu_share: float | None
    worker_runq_share: float | None
    main_cpu_share: float | None
    main_handover_share: float | None
    workers_that_fit_memory: int | None
    uncounted_per_worker_bytes: int


class TrialStartEvent(Event, TrialSpecFields, total=False):
    """EV_TRIAL_START: what the job held as the trial began (the parent the workers join)."""

    cgroup_usage_bytes: int | None
    cgroup_limit_dir: str | None
    cgroup_reclaimable_bytes: int | None


class TrialEndEvent(Event, TrialResultFields, total=False):
    """EV_TRIAL_END: the trial's measurement."""


class TrialSkippedEvent(Event, TrialSpecFields, total=False):
    """EV_TRIAL_SKIPPED: a trial not run (past an OOM-killed count, or the budget spent)."""

    reason: str


class TuneConfirmEvent(Event, total=False):
    """EV_TUNE_CONFIRM: the configurations measured once more before the recommendation, with their first rates."""

    keys: list[str]
    rates: list[float | None]
    tolerance: float


class TuneWorkersStopEvent(Event, total=False):
    """EV_TUNE_WORKERS_STOP: why tune tried no more worker counts."""

    reason: str
    top: int  # the highest count planned


class ScanStartEvent(Event, total=False):
    """EV_SCAN_START: the scan's plan for one loader (in_training/scan/engine.py)."""

    loader: int | None
    dataset_type: str
    total: int | None  # len(dataset); None for a stream without a length
    selected: int | None
    iterable: bool
    workers: int
    start_method: str
    shapes: bool
    shape_note: str
    timeout_s: float
    role: str | None  # Lightning's stage, where the loader is one of a LightningModule's
    other_loaders: list[dict[str, Any]]  # loaders alive besides it, by dataset


class ScanProgressEvent(Event, total=False):
    done: int
    bad: int


class ScanBadEvent(Event, total=False):
    index: int
    kind: str
    detail: str
    where: str
    path: str


class ScanErrorEvent(Event, total=False):
    message: str
    hint: str | None


class ScanSkippedEvent(Event, total=False):
    dataset_type: str
    message: str
    hint: str | None


class ScanEndEvent(Event, total=False):
    scanned: int
    duration_s: float
    interrupted: bool
    note: str | None


class CgroupReading(TypedDict, total=False):
    """samples.jsonl "cg": the run's memory cgroup (system/cgroup.memory_state)."""

    usage: int | None
    limit: int | None  # the tightest limit on the way to the root; None when unlimited everywhere
    limit_dir: str | None  # the cgroup whose limit that is
    oom_kill: int | None
    # Of usage, page cache the kernel drops before it kills (system/cgroup.reclaimable_cache): read under a limit, with
    # the processes' USS (a full round), so the cgroup's charge beyond their private memory can be measured.
    cache: int | None


class Sample(TypedDict, total=False):
    """One line of samples.jsonl; "k" says which: proc (a new process), s (a reading), gone (a process ended)."""

    k: str
    t: float
    pid: int
    ppid: int | None
    comm: str | None
    p: dict[str, dict[str, int | float | None]]  # pid (as text) -> rss/uss/pss/swap, SAMPLE_CPU, SAMPLE_RUN_DELAY
    # worker threads: tid (as text) -> SAMPLE_CPU, SAMPLE_RUN_DELAY from /proc/PID/task/TID (no memory of their own)
    th: dict[str, dict[str, float | None]]
    tid: int
    shm: dict[str, int]
    avail: int | None
    cg: CgroupReading
    nofile: int | None  # proc: its soft RLIMIT_NOFILE (None: unlimited or not read)
    start: float | None  # proc: when the process began (its /proc start time, wall clock); None: not read
    n: int  # fdt: the descriptors open when their targets were read
    top: list[list[Any]]  # fdt: [target pattern, count], most first (system/procfds.target_pattern)
    error: str  # unread: why the process's smaps_rollup could not be read


class HangRecord(TypedDict, total=False):
    """hangs/hang-N.json: what the supervisor saw when the loop had waited past --hang-timeout."""

    number: int
    t: float
    waited_s: float
    loop: dict[str, Any]
    main_pid: int
    processes: list[dict[str, Any]]
    stack_problem: dict[str, Any] | None
    on_hang: str
    timeout_s: float


class KernelFile(TypedDict, total=False):
    """kernel.json: the kernel's OOM-kill records naming the run's processes (system/kernlog.oom_kills)."""

    readable: bool
    kills: list[dict[str, Any]]  # pid, line, ...


class StacksMeta(TypedDict, total=False):
    """stacks.json: the hotspot sampler's settings and outcome; `error` is why it recorded nothing (py-spy's own
    message when py-spy failed)."""

    rate: int
    window_s: float
    status: str  # SAMPLER_*
    error: str | None
    burst_s: int  # seconds of each burst on one process; absent in runs that sampled the whole tree at once
    sampled_pids: list[int]  # the process of each burst that left stacks, in order
    cpu_s: float  # py-spy's own CPU time (user + system) over all bursts: what the sampling cost the machine
    fetch_samples: int  # samples inside the workers' fetch path: the window ends once they rank (ranked_enough)


class Machine(TypedDict, total=False):
    """meta.json "machine": facts of the machine the run was recorded on (supervisor/run_options.machine_facts)."""

    host: str
    platform: str
    python: str
    cpu_count: int | None
    cpu_affinity: int
    cpu_quota: float | None  # the cgroup's CPU quota in cores
    usable_cores: int
    mem_total: int
    mem_available: int
    shm_total: int | None
    load_avg_1m: float | None  # the 1-minute load average as the run started (None: not readable)


class PromMeta(TypedDict, total=False):
    """meta.json "prometheus": where the run's live exposition was (`--prom-textfile`, `--prom-listen`)."""

    job: str  # the `job` label of every series
    textfile: str  # the file in node_exporter's textfile directory (removed at the end of the run)
    listen: str  # HOST:PORT serving /metrics (the port the system chose, for --prom-listen 0)


class Meta(TypedDict, total=False):
    schema_version: int
    dlprobe_version: str
    script: str  # the script, the module (-m) or the command's first word
    argv: list[str]
    launch: str  # LAUNCH_*: how the target was started (absent in runs before launchers: a script)
    command: list[str]  # the full command line that was started, as the user gave it
    node_rank: int | None  # this node's rank in a several-node job (from the command's --node-rank), else None
    cwd: str
    started_at: float
    machine: Machine
    target_pid: int
    cgroup: str | None
    cgroup_limit_dir: str | None  # the cgroup on the path to the root whose memory limit is the tightest
    in_process: bool
    attached: bool  # `dlprobe attach`: the job was already running; no hooks, only what /proc and py-spy show
    attached_pid: int  # the pid given to `dlprobe attach` (target_pid is the root of the tree it watched)
    start_method_forced: str  # `dlprobe run --start-method M`: every loader's workers were asked to start with M
    own_options_after_script: list[str]  # `dlprobe run s.py --verbose`: options of dlprobe's the script got
    isolated_checks: bool  # False: `--no-isolated-checks` (no copy of the training forked for dlprobe's checks)
    prometheus: PromMeta  # `--prom-textfile` / `--prom-listen`: where the live metrics were exposed


class SupervisorCost(TypedDict, total=False):
    """result.json "supervisor": what probing cost, and whether the supervisor's own CPU cap cut its reads."""

    cpu_s: float  # its CPU seconds, start-up included
    max_rss_bytes: int
    cpu_budget: float  # the cap, as a share of one core (supervisor/budget.py)
    cpu_share: float  # its share of one core while the target ran
    wall_s: float  # the seconds that share is over
    cpu_window_s: float  # the cap holds over any window this long; a shorter run may show more (its start-up)
    over_budget_s: float  # seconds it ran over the cap and skipped smaps_rollup reads of moving processes
    deep_reads_skipped: int  # such skipped reads (every process was still read at least every 5 s)


# torch's workers check on their main process every MP_STATUS_CHECK_INTERVAL (5 s) and exit once it is gone; the
# supervisor records workers that outlive the job this long, then names those left running (result.json "orphans_left").
ORPHAN_GRACE_S = 6.0


class ShmRemoved(TypedDict):
    """result.json "shm_removed": a torch_<pid>_* file a dead process of the job left in /dev/shm, removed."""

    name: str
    bytes: int


class SupervisorProblem(TypedDict):
    """result.json "problems": a part of the supervisor that failed, and what the report lacks because of it."""

    where: str
    type: str
    message: str
    consequence: str
    count: int


class StderrKept(TypedDict, total=False):
    """Where the script's stderr went, and what stderr.log holds of it: dlprobe is never between the script and its
    stderr, so only a regular file (a Slurm or CI log) can be read back after the run."""

    kind: str  # "file", "terminal", "pipe", "socket", "closed", "other"
    written_bytes: int | None  # what the run wrote to the file (kind "file")
    kept_bytes: int  # what stderr.log holds: all of it, or its head and its end, at most STDERR_KEPT_BYTES
    problem: str | None  # why a file could not be read back


class Result(TypedDict, total=False):
    returncode: int
    exit_code: int
    signal: str | None
    ended_at: float
    supervisor: SupervisorCost
    hangs: int
    stopped_by: str  # for people
    stop_reason: str  # for programs: STOP_REASON_HANG
    survivors: list[int]
    shm_removed: list[ShmRemoved]  # system/shm_files.py; absent when nothing was left
    orphans_stopped: list[int]  # workers still running ORPHAN_GRACE_S after a run dlprobe ended (--on-hang stop, tune)
    orphans_left: list[int]  # workers still running ORPHAN_GRACE_S after the job's exit, left running as python does
    problems: list[SupervisorProblem]  # the supervisor's own failures (supervisor/problems.py); absent when none
    stderr: StderrKept  # what of the script's stderr stderr.log keeps (supervisor/stderr_copy.py)


class AttachRecord(TypedDict, total=False):
    """attach.json: the outside view of `dlprobe attach` (supervisor/attach.py), read by analysis/attach_findings."""

    asked_pid: int
    root_pid: int
    notes: list[str]  # what PID turned out to be (a worker, one rank of several)
    t_start: float
    t_end: float
    interrupted: bool  # Ctrl-C ended the window early
    job_ended: bool  # every process of the tree exited during the window
    # per process: pid, ppid, comm, cmdline, role (main|worker|launcher|other), main_pid, rank, local_rank,
    # cpu_s (utime+stime over the window; None if it was not seen at both ends), state, wchan, syscall,
    # first_seen, gone_at, stack (threads, innermost frame first), stack_error
    processes: list[dict[str, Any]]
    stack_problem: dict[str, Any] | None  # kind (missing | permission | failed), error, advice
    rerun: str  # the `dlprobe run` command that gives the in-process findings


def run_schema_version(meta: dict[str, Any] | Meta) -> int:
    """The run's schema version; a run written before the field existed is version 1."""
    version = meta.get("schema_version", LEGACY_RUN_SCHEMA_VERSION)
    return version if isinstance(version, int) else LEGACY_RUN_SCHEMA_VERSION
