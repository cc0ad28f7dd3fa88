"""Times the training loop's own step (between a batch handed to it and its next request) before a take-over."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

# The loop's first step is left out: a model's first forward pass (allocation, compilation, a device's start) costs
# many times a steady one.
SKIP_FIRST = 1
MIN_STEPS = 3  # fewer steady steps than this say too little of the loop to bound the advice by it
ENOUGH_WALL_S = 3.0  # past this long of steady steps, a loop of slow steps is taken over with what it timed...
GIVE_UP_S = 10.0  # ...and past this long since its first batch, whatever it timed (the trials need the budget)
MAX_PASSES = 3  # passes over the loader (epochs) timing may span


class LoopClock:
    """The script's loop over one loader, timed for `steps` steady steps: each step's wall time (from next()
    returning a batch to the loop asking for the next one) and the process's CPU time over it (its other threads
    too: pin-memory, logging; so an upper bound of the step's own).

    A plain class, not a dataclass: this module is imported before the user's first line, and dataclasses pulls in
    inspect. `now` and `cpu` are the clocks (tests pass their own)."""

    def __init__(
        self,
        loader: Any,
        loader_id: int,
        steps: int,
        now: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.loader, self.loader_id, self.steps = loader, loader_id, steps
        self.now, self.cpu = now, cpu
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.first_at: float | None = None  # the first batch handed to the loop
        self.steady_from: float | None = None  # the end of the steps left out
        self.passes = 1  # passes the loop began over this loader while it was timed
        self._returned: tuple[float, float] | None = None
        self._seen = 0
        self._iterator: Any = None  # a weak reference to the iterator the loop last took a batch from

    @property
    def iterator(self) -> Any:
        """The loop's iterator, while it lives: its workers are stopped before the take-over."""
        return self._iterator() if self._iterator is not None else None

    def asking(self) -> None:
        """The loop asks for its next batch: the step since the last one ends here."""
        if self._returned is None:
            return
        now = self.now()
        wall, cpu = now - self._returned[0], self.cpu() - self._returned[1]
        self._seen += 1
        if self._seen > SKIP_FIRST:
            self.walls.append(wall)
            self.cpus.append(cpu)
        elif self._seen == SKIP_FIRST:
            self.steady_from = now

    def returned(self, iterator: Any) -> None:
        """`iterator`'s next() handed the loop a batch."""
        now = self.now()
        try:
            self._iterator = weakref.ref(iterator)
        except TypeError:  # an iterator class with __slots__ and no weak references: its workers stop with it
            self._iterator = None
        self.first_at = self.first_at if self.first_at is not None else now
        self._returned = (now, self.cpu())

    def new_pass(self) -> bool:
        """The loop starts a new pass over this loader (its next epoch; or `next(iter(loader))` to peek, then the
        loop): timing goes on across it, the gap between the passes left out, for up to MAX_PASSES passes (a loader
        of a batch or two a pass is then taken over with what it timed). False: take it over now."""
        self.passes += 1
        self._returned = None
        return self.passes <= MAX_PASSES

    def done(self) -> bool:
        """Enough steady steps timed, or a loop of slow steps timed for long enough (MIN_STEPS past ENOUGH_WALL_S
        of steady steps, or anything past GIVE_UP_S since its first batch)."""
        if len(self.walls) >= self.steps:
            return True
        now = self.now()
        steady = self.steady_from is not None and now - self.steady_from > ENOUGH_WALL_S
        return (steady and len(self.walls) >= MIN_STEPS) or (
            self.first_at is not None and now - self.first_at > GIVE_UP_S
        )

    def summary(self) -> dict[str, Any]:
        """What tune reads: the loop's own seconds per batch (the median step: a first step still warming up, or one
        that saved a checkpoint, is not the steady one), its CPU share over those steps, and the steps timed; the
        step is None under MIN_STEPS."""
        walls = sorted(self.walls)
        if len(walls) < MIN_STEPS:
            return {"loop_steps": len(walls), "loop_step_s": None, "loop_cpu_share": None}
        middle = len(walls) // 2
        median = walls[middle] if len(walls) % 2 else (walls[middle - 1] + walls[middle]) / 2
        wall = sum(self.walls)
        return {
            "loop_steps": len(walls),
            "loop_step_s": round(median, 6),
            "loop_cpu_share": round(sum(self.cpus) / wall, 3) if wall > 0 else None,
        }
