"""The supervisor's own CPU budget: measures its share of one core and says how much optional work it can afford."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from dlprobe.rundir.schema import SupervisorCost

# A probe that costs more than a few percent of a core is turned off by its users; on a 2-core machine with 8
# workers 3% is already a visible slice of what the loader gets.
DEFAULT_SHARE = 0.03
WINDOW_S = 10.0  # long enough to average over a burst of reads, short enough to react within a few seconds
# The run so far is capped too, not only each window: a sliding window lets a burst early in one window (the first
# reads of 64 new processes, or a window's whole allowance spent in its first seconds) be followed by a full
# allowance in the next, so a 15 s run came out at 3.7% of a core (benchmarks/supervisor_scaling.py, 16-64 moving
# processes). Over the run, optional work is planned to RUN_SHARE of the cap, so that the work that asks no leave
# (cheap readings between rounds, new processes' first reads, the end of the run) does not tip it over.
RUN_SHARE = 0.9


class CpuBudget:
    """A cap on the supervisor's own CPU share (all its threads), enforced by the caller skipping optional work.

    `allowance()` is the CPU time optional work (smaps_rollup reads) may still use now so that the share over the
    last WINDOW_S stays under the cap, and the share over the whole run under RUN_SHARE of it; what must happen
    (cheap readings, deaths, hangs) is never asked for leave.
    """

    def __init__(
        self,
        share: float = DEFAULT_SHARE,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.share = share
        self.clock = clock
        self.cpu = cpu
        self.started = clock()
        self.cpu_at_start = cpu()
        self.history: deque[tuple[float, float]] = deque([(self.started, self.cpu_at_start)])
        self.over_s = 0.0  # wall seconds spent over the cap (when optional work was cut)
        self.last_check: float | None = None
        self.skipped = 0

    def allowance(self) -> float:
        """CPU seconds optional work may use now; <= 0 means skip it."""
        now, used = self.clock(), self.cpu()
        self.history.append((now, used))
        while len(self.history) > 2 and now - self.history[1][0] >= WINDOW_S:
            self.history.popleft()
        t0, cpu0 = self.history[0]
        # Until a full window has passed, judge against the window's length so start-up does not look expensive.
        span = max(now - t0, WINDOW_S)
        run_left = RUN_SHARE * self.share * (now - self.started) - (used - self.cpu_at_start)
        left = min(self.share * span - (used - cpu0), run_left)
        if self.last_check is not None and left <= 0:
            self.over_s += now - self.last_check
        self.last_check = now
        return left

    def note_skipped(self, count: int) -> None:
        self.skipped += count

    def summary(self) -> SupervisorCost:
        """For result.json's "supervisor" section: the cap, the share over the whole run, and what was cut."""
        wall = max(self.clock() - self.started, 1e-9)
        return {
            "cpu_budget": self.share,
            "cpu_share": round((self.cpu() - self.cpu_at_start) / wall, 4),
            "wall_s": round(wall, 2),
            "cpu_window_s": WINDOW_S,
            "over_budget_s": round(self.over_s, 2),
            "deep_reads_skipped": self.skipped,
        }
