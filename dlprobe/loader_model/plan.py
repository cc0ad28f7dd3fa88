"""The worker plan: how many workers the model of the loader advises, what bounds that number, and the rate it
predicts there (run's input-bound advice; tune measures the same curve)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlprobe.loader_model.limits import CPU_BOUND_SHARE, HEADROOM, KNEE_SHORT, WORKER_CAP
from dlprobe.loader_model.rate import cores_left, knee, predicted_rate, queued_rate, rate_bounds

# What can bound the advised num_workers; ties go to the first.
PLAN_LIMITS = ("memory", "main", "handover", "cores", "loop", "cap")


@dataclass
class WorkerPlan:
    """How many workers the model of the loader advises, what bounds that number, and the throughput it predicts."""

    workers: int
    limit: str  # one of PLAN_LIMITS
    batches_per_s_now: float
    batches_per_s: float  # predicted at `workers`
    limits: dict[str, int]
    cores_left: float  # of the usable cores, what other work left to the loader
    main_cpu_s: float | None  # the main process's CPU seconds per batch; None: not read


@dataclass(frozen=True)
class LoaderPace:
    """What one window of the loop and its workers measured, as plain numbers: the loop's mean wait for a batch and
    its own step (seconds), the hand-over's time per batch (None: not timed), and the workers' shares of their wall
    time on a CPU, queued for one (None: not read) and both."""

    mean_wait_s: float
    step_s: float
    handover_s: float | None
    cpu_share: float
    runq_share: float | None
    busy_share: float

    @property
    def cpu_bound(self) -> bool:
        return self.busy_share >= CPU_BOUND_SHARE


def plan_workers(
    nw: int, pace: LoaderPace, cores: int, fit_memory: int | None, main_share: float | None = None
) -> WorkerPlan:
    """The model, tune's (rate.py): while the loop starves, n workers deliver n / (one worker's time per batch)
    batches per second, until the CPU per batch of a worker and of the main process fills the cores other work leaves,
    the main process's one thread or the loop's own step is the limit, memory runs out (`fit_memory` workers fit) or
    the stated cap WORKER_CAP is reached; the smallest of these is the advice."""
    cycle = pace.mean_wait_s + pace.step_s
    per_batch = nw * cycle  # one worker's wall time per batch, the loop starving
    now = 1 / cycle if cycle > 0 else 0.0
    left = cores_left(cores, pace.cpu_share, pace.runq_share, pace.busy_share)
    # One thread receives the batches: CPU beyond one core is the step's own threads (intra-op), not receiving.
    main_cpu_s = min(1.0, main_share) / now if main_share is not None and now > 0 else None
    worker_cpu_s = pace.cpu_share * per_batch
    # CPU-bound workers: the hand-over waits for the GIL its worker holds computing, the worker's time (tune's too)
    handover_s = pace.handover_s if not pace.cpu_bound else None
    bounds = rate_bounds(1, per_batch, worker_cpu_s, main_cpu_s, left, step_s=pace.step_s, handover_s=handover_s)
    limits = {"cap": WORKER_CAP}
    if "cores" in bounds:  # no CPU tick at all over the window: the cores bound nothing below the cap
        corner = max(1, int(bounds["cores"] * per_batch))
        # Workers that sleep part of each batch and wake together queue for the cores: the curve reaches the cores
        # bound at its knee, past the corner. Workers that want a core all the time stop at the corner, as tune's
        # search does: more only queue for the cores.
        if pace.cpu_bound:
            limits["cores"] = corner
        else:  # a knee past the cap leaves the cap to decide
            found = knee(lambda n: queued_rate(n, per_batch, worker_cpu_s, main_cpu_s, cores, left), bounds["cores"],
                         KNEE_SHORT, corner, WORKER_CAP)  # fmt: skip
            if found is not None:
                limits["cores"] = found
    if "main" in bounds:  # the consumer's side: ask for a little more, so a slow batch does not stall it
        limits["main"] = max(1, math.ceil(HEADROOM * bounds["main"] * per_batch))
    if "handover" in bounds:  # the same thread's wall time, asleep part of it: as the main process's CPU
        limits["handover"] = max(1, math.ceil(HEADROOM * bounds["handover"] * per_batch))
    if "loop" in bounds:  # a loop with no work of its own takes whatever comes
        limits["loop"] = math.ceil(HEADROOM * bounds["loop"] * per_batch)
    if fit_memory is not None:
        limits["memory"] = max(1, fit_memory)
    limit = min(PLAN_LIMITS, key=lambda name: limits.get(name, WORKER_CAP + 1))  # ties: the first in PLAN_LIMITS
    n = limits[limit]
    predicted = predicted_rate(n, per_batch, worker_cpu_s, main_cpu_s, cores, left, step_s=pace.step_s,
                               handover_s=handover_s)  # fmt: skip
    return WorkerPlan(n, limit, now, max(now, predicted) if n > nw else now, limits, left, main_cpu_s)
