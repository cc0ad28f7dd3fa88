"""The shapes of events.jsonl's lines from the commands that take the script's loader over: tune's loop
timing, loader and trials, and scan's progress. Imported through rundir/schema.py."""

# No `from __future__ import annotations` (as in schema.py): string annotations compiled into ForwardRefs
# would triple the import's CPU time in every process that imports the schema.
from typing import Any, TypedDict

from dlprobe.rundir.events import Event


class TakeoverEvent(Event, total=False):
    """EV_TAKEOVER: the loop's loader handed to scan's or tune's function instead of training (in_training/takeover)."""

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
