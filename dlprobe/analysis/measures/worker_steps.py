"""A worker's one-time steps of memory, found once for the report's growth, `dlprobe check` and gc-copy alike."""

from __future__ import annotations

from dataclasses import dataclass

from dlprobe.analysis.measures.stats import job_pss_summable
from dlprobe.analysis.measures.worker_growth import first_batch_built
from dlprobe.analysis.run.model import ProcessRecord, RunData
from dlprobe.loader_model.worker_memory import FULL_COLLECTION, Step, find_steps


@dataclass(frozen=True)
class WorkerSteps:
    readings: list[tuple[float, int]]  # (t, USS), in time order
    after: float  # where its steady part starts: its first batch built (else its second reading)
    start: int  # USS at the first reading of the steady part: what it held by then is held, not growth
    steps: list[Step]

    def stepped_in_steady_part(self) -> int:
        """The steps' bytes read after the steady part's first reading: a step read wholly before it is in what the
        worker held at the start; one that spans it (a collection across the reading right after the first batch)
        holds the rest of its rise after it. Counted whole, a copy that began before that reading and ended after it
        read as 30.5 MiB of steady growth against a baseline's 0.1 MiB."""
        start_t = next((t for t, _ in self.readings if t >= self.after), self.readings[-1][0])
        values = dict(self.readings)
        total = 0
        for step in self.steps:
            if step.t_before >= start_t:
                total += step.bytes
            elif step.t > start_t:
                total += max(0, min(step.bytes, values.get(step.t, self.start) - self.start))
        return total


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
    ends = {t: t + d for t, d in zip(proc.series.t, proc.series.read_at, strict=False) if d}
    steps = find_steps(readings, after, proc.full_collections, ends)
    # A collection writes to the objects' headers: their pages turn private and dirty. A rise that is not mostly
    # Private_Dirty (a memory-mapped file's pages read by this worker alone count in USS too) is no copy of the
    # collector's, whatever ran inside it: those collections are left out and the rises judged by the readings alone.
    unlike = [
        c
        for st in steps
        if st.cause == FULL_COLLECTION and _dirty_rise(proc, st) < COPY_DIRTY_SHARE * st.bytes
        for c in proc.full_collections
        if c[1] >= st.t_before and c[0] < st.t
    ]
    if unlike:
        steps = find_steps(readings, after, [c for c in proc.full_collections if c not in unlike], ends)
    return WorkerSteps(readings, after, start, steps)


COPY_DIRTY_SHARE = 0.5  # of a collection's step, at least this much is Private_Dirty's rise (when it was read)


def _dirty_rise(proc: ProcessRecord, step: Step) -> float:
    """Private_Dirty's rise over the step's readings; the step's own size where Private_Dirty was not read."""
    dirty = dict(proc.series.values("private_dirty"))
    before, after = dirty.get(step.t_before), dirty.get(step.t)
    return float(after - before) if before is not None and after is not None else float(step.bytes)


def job_steady_peak(run: RunData, metric: str = "pss_anon") -> int | None:
    """The peak of the job's total `metric` over time with the workers' one-time steps apart: at each sum, less the
    steps its workers' readings already hold. A sum made while a step was under way is left out: the parent's reading
    may hold its side of the copy (pages it shared are now its own: 2/3 of a 34 MiB step with two workers) while the
    worker's reading does not hold the step yet, so neither the step nor its absence is in it whole. The peak less
    every step, wherever they fell, read a run whose workers stepped after its peak 69 MiB under a run whose did
    not (157 against 225 MiB), which failed a baseline gate. None where no sum can be made."""
    steps = [s for p in run.processes if p.role == "worker" and (found := worker_steps(run, p)) for s in found.steps]
    times, totals = job_pss_summable(run.processes, metric)
    steady = [
        total - sum(s.bytes for s in steps if s.t <= t)
        for t, total in zip(times, totals, strict=True)
        if not any(s.t_before < t < s.t for s in steps)
    ]
    return max(steady, default=None)
