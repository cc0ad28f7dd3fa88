"""Times the training loop's own step (between a batch handed to it and its next request) before a take-over."""

from __future__ import annotations

import time
import weakref
from typing import Any

# The loop's first step is left out: a model's first forward pass (allocation, compilation, a device's start) costs
# many times a steady one.
SKIP_FIRST = 1
ENOUGH_WALL_S = 3.0  # past this long since the first batch, a loop of slow steps is taken over with what it timed


class LoopClock:
    """The script's loop over one loader, timed for `steps` steady steps: each step's wall time (from next()
    returning a batch to the loop asking for the next one) and the process's CPU time over it.

    A plain class, not a dataclass: this module is imported before the user's first line, and dataclasses pulls in
    inspect."""

    def __init__(self, loader: Any, loader_id: int, steps: int) -> None:
        self.loader, self.loader_id, self.steps = loader, loader_id, steps
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.waits: list[float] = []  # the loop's waits for the batches it timed steps between
        self.first_at: float | None = None
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
        wall, cpu = time.perf_counter() - self._returned[0], time.process_time() - self._returned[1]
        self._seen += 1
        if self._seen > SKIP_FIRST:
            self.walls.append(wall)
            self.cpus.append(cpu)

    def returned(self, iterator: Any, wait_s: float) -> None:
        """`iterator`'s next() handed the loop a batch after waiting `wait_s` for it."""
        now = time.perf_counter()
        try:
            self._iterator = weakref.ref(iterator)
        except TypeError:  # an iterator class with __slots__ and no weak references: its workers stop with it
            self._iterator = None
        self.first_at = self.first_at if self.first_at is not None else now
        if self._seen >= SKIP_FIRST:
            self.waits.append(wait_s)
        self._returned = (now, time.process_time())

    def done(self) -> bool:
        """Enough steps timed, or a loop of slow steps timed at least one past ENOUGH_WALL_S."""
        if len(self.walls) >= self.steps:
            return True
        return bool(self.walls) and self.first_at is not None and time.perf_counter() - self.first_at > ENOUGH_WALL_S

    def summary(self) -> dict[str, Any]:
        """What tune reads: the loop's own seconds per batch (mean: a periodic log or checkpoint is part of it),
        its CPU share over those steps, and the steps timed (0: the loop was not timed)."""
        if not self.walls:
            return {"loop_steps": 0, "loop_step_s": None, "loop_cpu_share": None}
        wall = sum(self.walls)
        return {
            "loop_steps": len(self.walls),
            "loop_step_s": round(wall / len(self.walls), 6),
            "loop_cpu_share": round(sum(self.cpus) / wall, 3) if wall > 0 else None,
            "loop_wait_s": round(sum(self.waits) / len(self.waits), 6) if self.waits else None,
        }
