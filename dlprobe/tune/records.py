"""tune's records, typed: a trial row (what tune.json lists per configuration) and tune.json itself. The trial events
inside an attempt's run directory are rundir/schema.py's (TrialStartEvent, TrialEndEvent), checked at load."""

from __future__ import annotations

from typing import Any, TypedDict

from dlprobe.rundir.schema import TrialResultFields


class TrialRow(TrialResultFields, total=False):
    """One configuration's row (tune/results.py collect_trials, then recommend and predict.annotate)."""

    duration_s: float  # from its trial_start to its trial_end
    # Memory (tune/results.py: a worker's peak and steady growth, as `run` reads them; its memory at the end of a full
    # epoch projected as `run` projects it, bent toward its ceiling: loader_model/memory_growth.py)
    worker_uss_peak_bytes: int | None
    worker_uss_growth_bytes: int | None
    steady_window_s: float | None
    loaded_at_start: bool
    projected_worker_bytes: int | None  # the largest worker's, at the end of a full epoch
    worker_projection: dict[str, Any] | None  # its WorkerProjection.evidence(): parts, ceilings, where measured
    shm_peak_delta_bytes: int | None
    batch_bytes: int | None
    shm_in_flight_bytes: int | None
    duplicates: int
    projected_epoch_bytes: int | None
    reserve_bytes: int | None
    fits_memory: bool | None
    # The kernel's OOM killer, where it ended the trial (tune/results.py oom_death)
    oom_kill_pid: int
    oom_kernel_line: str | None
    killed_rss_bytes: int | None
    cgroup_oom_kills: int
    memory_at_death_bytes: int | None
    # The pick (tune/results.py recommend) and the model's error (tune/predict.py annotate)
    vs_best: float
    job_samples_per_s: float
    prediction_error: float
    prediction_fitted: bool
    # A configuration measured more than once (tune/plan.py merge_repeat)
    repeated_rates: list[float | None]
    repeated_statuses: list[str | None]
    repeats: int


class TuneMemory(TypedDict, total=False):
    """What the workers may use (tune/results.py memory_available)."""

    mem_available_bytes: int | None
    cgroup_limit_bytes: int | None
    parent_bytes: int
    held_bytes: int
    page_cache_bytes: int | None
    supervisor_bytes: int | None
    parent_growth_bytes: int
    budget_bytes: int | None
    source: str  # cgroup limit | MemAvailable


class Recommended(TypedDict):
    num_workers: int | None
    prefetch_factor: int | None
    pin_memory: bool | None
    samples_per_s: float | None
    vs_best: float | None
    projected_epoch_bytes: int | None


class TuneResult(TypedDict):
    """tune.json (supervisor/tune_sweep.py run_tune), read by render/tune_table.py, tune_plot.py and html_results.py."""

    schema_version: int
    dlprobe_version: str
    script: str
    argv: list[str]
    loader: int
    dir: str
    budget_s: float
    elapsed_s: float
    batches_per_trial: int
    tolerance: float
    cpu: dict[str, Any]  # system/cpus.py cpu_facts
    memory: TuneMemory | None
    accelerator: bool | None
    loader_config: dict[str, Any]  # rundir/schema.py TuneLoaderEvent's fields, less the event's own
    loop: dict[str, Any]  # loop_steps, loop_step_s, loop_cpu_share, samples_per_s
    notes: list[str]
    attempts: list[dict[str, Any]]  # run_dir, exit_code, trials
    trials: list[TrialRow]
    workers_cap: int
    workers_stop: dict[str, Any] | None  # reason, top
    prediction: dict[str, Any] | None  # tune/predict.py annotate
    recommended: Recommended | None
    reason: str
