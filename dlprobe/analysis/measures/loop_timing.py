"""Steady-state timing of a training loop: how long it waits for data and how long its own step takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.run.model import Epoch, LoaderRecord, RunData


@dataclass
class LoopTiming:
    batches: int  # steady batches: the first batch of each epoch (start-up) is left out
    wait_s: float  # time spent inside next(iterator) for those batches
    span_s: float  # wall time those batches covered
    median_wait_s: float
    p95_wait_s: float
    # the main process's time per batch taking it off the workers' result queue (in next(), or on the pin-memory
    # thread): one thread, one batch at a time, so more workers cannot shorten it; None: not timed
    handover_s: float | None = None

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def mean_wait_s(self) -> float:
        return self.wait_s / self.batches if self.batches else 0.0

    @property
    def step_s(self) -> float:
        """The loop's own work per batch (forward/backward, logging): span minus waiting."""
        return max(0.0, self.span_s - self.wait_s) / self.batches if self.batches else 0.0


def steady_window(epoch: Epoch) -> tuple[float, float] | None:
    """From the epoch's first batch received (start-up over) to its end or last batch; None under 2 batches."""
    end = epoch.t_end or epoch.t_last_batch
    if len(epoch.waits) < 2 or end is None:
        return None
    return epoch.t_start + epoch.iter_s + epoch.waits[0], end


def loop_timing(loader: LoaderRecord) -> LoopTiming | None:
    """Timing over all epochs after each epoch's first batch; None without at least 2 steady batches. Counts and sums
    are every batch's; the median and p95 the kept waits' (a uniform sample of a long run's, analysis/run/model.py)."""
    waits: list[float] = []
    batches, wait_s = 0, 0.0
    handover_s: float | None = 0.0
    span = 0.0
    for epoch in loader.epochs:
        window = steady_window(epoch)
        if window is None:
            continue
        span += max(0.0, window[1] - window[0])
        waits.extend(epoch.waits[1:])
        batches += (epoch.batches if epoch.wait_stride > 1 else len(epoch.waits)) - 1
        wait_s += epoch.wait_s - epoch.waits[0]
        epoch_handover = epoch.handover_s
        if handover_s is not None and epoch_handover is not None and epoch.handovers:
            handover_s += epoch_handover - epoch.handovers[0]
        else:
            handover_s = None  # an epoch not timed: no mean over part of the batches
    if len(waits) < 2 or span <= 0:
        return None
    ordered = sorted(waits)
    return LoopTiming(
        batches=batches,
        wait_s=wait_s,
        span_s=span,
        median_wait_s=ordered[len(ordered) // 2],
        p95_wait_s=ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        handover_s=handover_s / batches if handover_s is not None and batches else None,
    )


def recorded_usable_cores(run: RunData) -> int:
    """The usable cores that system.cpus.usable_cores measured when the run was recorded (meta.json), never the
    machine analysis happens to run on; older runs recorded only the affinity."""
    machine = run.meta.get("machine", {})
    return int(machine.get("usable_cores") or machine.get("cpu_affinity") or machine.get("cpu_count") or 1)


def events_of(run: RunData, kind: str, loader_id: int | None = None) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("ev") == kind and (loader_id is None or e.get("loader") == loader_id)]
