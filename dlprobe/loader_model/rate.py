"""The loader's throughput model: the bounds on the rate, the predicted rate and the knee, one for `run`'s advice and
`tune`'s search."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from dlprobe.loader_model.limits import CPU_BOUND_SHARE, HEADROOM, QUEUED_BELOW
from dlprobe.loader_model.queueing import closed_throughput

# The bounds, by name: n workers each at its own pace; the cores left over the CPU per item of a worker and of the
# main process; one core over the main process's CPU per item (it receives every batch on one thread); the loop's
# own step per item; the main process's wall time per item taking batches off the workers' result queue (its CPU and
# the waits for each tensor's shared memory from the worker: one thread, one batch at a time); the best rate trials
# measured where they fell below the rest (a bound the model missed).
BOUNDS = ("workers", "cores", "main", "handover", "loop", "measured")


def workers_to_feed(batch_s: float, step_s: float) -> int:
    """Workers, each building a batch in `batch_s` of its own time, that deliver HEADROOM times the batches a loop of
    `step_s` a batch takes (1 for a loop with no measured step: nothing to size against)."""
    return max(1, math.ceil(HEADROOM * batch_s / step_s)) if step_s > 0 else 1


def cores_left(cores: int, cpu_share: float | None, runq_share: float | None, busy_share: float | None) -> float:
    """Of the usable cores, what other work on the machine leaves to the loader, read from one worker's queueing.

    Only a worker that wants a core all the time says it: the share of that time it got one is the share of the
    cores left. (A worker that mostly sleeps waits for a core each time it wakes, which says how busy the machine is,
    not how much of it more such workers can get.)"""
    cpu_bound = busy_share is not None and busy_share >= CPU_BOUND_SHARE
    if cpu_bound and cpu_share and runq_share is not None and cpu_share / (cpu_share + runq_share) < QUEUED_BELOW:
        return min(float(cores), cores * cpu_share / (cpu_share + runq_share))
    return float(cores)


def rate_bounds(
    n: int,
    worker_s: float,
    worker_cpu_s: float | None,
    main_cpu_s: float | None,
    cores_left: float,
    measured_cap: float | None = None,
    step_s: float | None = None,
    main_fixed: float = 0.0,
    handover_s: float | None = None,
) -> dict[str, float]:
    """Each bound on the rate (items per second, an item being what the seconds are per: a sample, a batch) of n
    workers; the rate is the smallest. `worker_s`: one worker's wall time per item; `worker_cpu_s`, `main_cpu_s`: CPU
    seconds per item of a worker and of the main process (None: not read, so they bound nothing); `step_s`: the
    loop's own time per item (None or ~0: a loop that takes whatever comes); `main_fixed`: the share of a core the
    main process uses whatever the rate (its other threads), where two rates told it apart from the per-item cost;
    `handover_s`: the main process's wall time per item taking batches off the result queue (None: not timed)."""
    out = {"workers": n / worker_s}
    cpu = (worker_cpu_s or 0.0) + (main_cpu_s or 0.0)
    if cpu > 0:
        # A CPU-bound loader saturates at the cores it has, never beyond: more workers only queue for them.
        out["cores"] = loader_cores(cores_left, main_fixed) / cpu
    if main_cpu_s:
        out["main"] = max(0.0, 1 - main_fixed) / main_cpu_s  # the main process receives every batch on one thread
    if handover_s:
        # Asleep part of it (each tensor's descriptor comes from its worker over a socket), so more than its CPU.
        out["handover"] = 1 / handover_s
    if step_s is not None and step_s > 1e-4:
        out["loop"] = 1 / step_s
    if measured_cap is not None:
        out["measured"] = measured_cap
    return out


def loader_cores(cores_left: float, main_fixed: float) -> float:
    """The cores the loader's per-item work has: those other work left, less the main process's fixed share (never
    below half of them: a share that large was read on a machine too busy to split it)."""
    return max(0.5 * cores_left, cores_left - main_fixed)


def queued_rate(
    n: int, worker_s: float, worker_cpu_s: float | None, main_cpu_s: float | None, cores: int, cores_left: float
) -> float:
    """The rate of n workers that are asleep part of each item and queue for the cores the rest (queueing.py):
    past the corner of the "workers" and "cores" bounds, workers that wake together wait for a core, so the curve
    reaches the cores bound at several times the corner's count (a CPU-bound worker, never asleep, at the corner)."""
    if n <= 0:
        return 0.0
    cpu = (worker_cpu_s or 0.0) + (main_cpu_s or 0.0)
    if worker_cpu_s is None or cpu <= 0 or cores_left <= 0:
        return n / worker_s
    # Other work's share of each core slows the loader's CPU time on it: the same cores, each slower.
    demand = cpu * cores / cores_left
    # One worker's wall time per item is its CPU and the rest (asleep, waiting on reads): exact at n=1.
    think = max(0.0, worker_s - demand)
    most = 1 << max(6, (n - 1).bit_length())  # one curve for every count up to the next power of two
    return _curve(most, round(think, 9), round(demand, 9), cores)[n - 1]


@lru_cache(maxsize=64)
def _curve(most: int, think: float, demand: float, servers: int) -> tuple[float, ...]:
    return tuple(closed_throughput(most, think, demand, servers))


def predicted_rate(
    n: int,
    worker_s: float,
    worker_cpu_s: float | None,
    main_cpu_s: float | None,
    cores: int,
    cores_left: float,
    measured_cap: float | None = None,
    step_s: float | None = None,
    main_fixed: float = 0.0,
    handover_s: float | None = None,
) -> float:
    """The model's rate of n workers: the queueing curve under the "workers" and "cores" bounds, and the smallest of
    the others (`rate_bounds`' arguments)."""
    bounds = rate_bounds(n, worker_s, worker_cpu_s, main_cpu_s, cores_left, measured_cap, step_s, main_fixed,
                         handover_s)  # fmt: skip
    # The main process's fixed share of a core is not the loader's to queue for, as in the cores bound.
    queued = queued_rate(n, worker_s, worker_cpu_s, main_cpu_s, cores, loader_cores(cores_left, main_fixed))
    return min([queued, *(v for k, v in bounds.items() if k not in ("workers", "cores"))])


def limit_of(bounds: dict[str, float]) -> str:
    """The bound that sets the rate (ties: the first in BOUNDS)."""
    return min(BOUNDS, key=lambda name: bounds.get(name, float("inf")))


def knee(rate: Callable[[int], float], bound: float, tolerance: float, first: int, last: int) -> int | None:
    """The fewest workers from `first` to `last` whose `rate` is within `tolerance` of `bound` (where more workers stop
    paying: tune measures there first, run advises it); None where none of them is."""
    return next((n for n in range(first, last + 1) if rate(n) >= (1 - tolerance) * bound), None)
