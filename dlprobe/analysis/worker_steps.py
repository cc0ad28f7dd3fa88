"""A worker's one-time steps of memory, found once for the report's growth, `dlprobe check` and gc-copy alike."""

from __future__ import annotations

from dataclasses import dataclass

from dlprobe.analysis.model import ProcessRecord, RunData
from dlprobe.analysis.worker_growth import first_batch_built
from dlprobe.loader_model.worker_memory import Step, find_steps


@dataclass(frozen=True)
class WorkerSteps:
    readings: list[tuple[float, int]]  # (t, USS), in time order
    after: float  # where its steady part starts: its first batch built (else its second reading)
    start: int  # USS at the first reading of the steady part: what it held by then is held, not growth
    steps: list[Step]


def worker_steps(run: RunData, proc: ProcessRecord) -> WorkerSteps | None:
    """`proc`'s USS readings and one-time steps (loader_model.worker_memory.find_steps, after its first batch, with
    its timed full garbage collections). None: USS never read, or not a loader's worker."""
    readings = sorted(proc.series.values("uss"))
    if not readings or proc.loader_id is None:
        return None
    built = first_batch_built(run, proc.loader_id, proc.pid)
    after = readings[1][0] if built is None and len(readings) > 1 else (built or 0.0)
    # the steady part starts at the first reading after the first batch (worker_growth.project_worker's start):
    # what the worker held by then (its imports settling, a load at start, the first batch) is held, not growth
    start = next((v for t, v in readings if t >= after), readings[-1][1])
    return WorkerSteps(readings, after, start, find_steps(readings, after, proc.full_collections))
