"""Head-of-line blocking: the loop waiting, in order, on one worker's batch while the other workers sit idle.

A DataLoader hands batches to the loop in the order the sampler made them (`in_order=True`, the default), and sends
a worker a new index only when the loop takes a batch. Each worker times its own batches (`worker_batches` events:
the batch's number in that order, when its fetch began, its fetch and collate seconds, its first index). From the
times each batch was done, the loop's in-order deliveries are replayed: batch k is delivered once it and every
batch before it are done. While the loop waits for batch k, the other workers either build their next batches
(too few workers: more would help) or sit idle, their prefetched batches built and no index coming (the order is
the bound: with `in_order=False` the loop would take their batches and send them more work).
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
from typing import Any

from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.timed_batches import timed_batches
from dlprobe.analysis.run.model import LoaderRecord, RunData

# The other workers idle half the time the loop waited: the order, not the number of workers, is the bound.
HOL_SHARE = 0.5
MIN_BATCHES = 16  # batches replayed in order before a share is worth a conclusion
SLOW_SHOWN = 5  # the slowest batches named in the evidence (their first index finds the expensive samples)
# A worker's first batches of an epoch pay for its warm-up (opening files, filling caches, a worker_init_fn's tail):
# every worker pays it, so in_order=False would not save it.
WARMUP_BATCHES = 3
# The holder waited for a core this share of its build (its own clock, schedstat): the machine slowed it, not this
# batch's samples, and the order is not the cause.
STALL_SHARE = 0.5


@dataclass
class HeadOfLine:
    """The in-order replay of one loader's batches: the loop's wait, the part of it the other workers sat idle, and
    which worker's batches the loop was waiting for then."""

    batches: int
    wait_s: float  # the loop's wait in the replay (every batch done after the one before it was delivered)
    blocked_s: float  # of it, the other workers' idle time while the holder built its batch (their mean)
    held_s: dict[int, float]  # blocked time by the worker whose batch the loop waited for
    build_s: list[float]  # each replayed batch's fetch + collate seconds
    slowest: list[dict[str, Any]] = field(default_factory=list)  # [{worker, batch, build_s, first_index}]

    @property
    def share(self) -> float:
        return self.blocked_s / self.wait_s if self.wait_s > 0 else 0.0

    def holders(self) -> list[tuple[int, float]]:
        """Workers by their share of the blocked time, largest first."""
        total = sum(self.held_s.values()) or 1.0
        return sorted(((w, s / total) for w, s in self.held_s.items()), key=lambda ws: -ws[1])

    def evidence(self) -> Evidence:
        ordered = sorted(self.build_s)
        return {
            "head_of_line_share": round(self.share, 3),
            "replayed_batches": self.batches,
            "replayed_wait_s": round(self.wait_s, 4),
            "blocked_wait_s": round(self.blocked_s, 4),
            "held_by_worker": {str(w): round(s, 3) for w, s in self.holders()},
            "batch_build_median_s": round(statistics.median(ordered), 5),
            "batch_build_max_s": round(ordered[-1], 5),
            "slowest_batches": self.slowest,
        }


# (done at, batch number, worker id, build seconds, first index, seconds queued for a core or -1: not read)
Row = tuple[float, int, int, float, int, float]


def _rows(run: RunData, loader: LoaderRecord) -> list[Row]:
    """Every batch timed one by one (stride 1) by the loader's workers."""
    # past the first rows a worker keeps every k-th batch: the order can no longer be replayed; a task of -1 is a
    # torch whose worker loop does not name the batch's number
    return [(row.start + row.build_s, row.task, row.worker, row.build_s, row.first,
             row.clocks[2] if row.clocks is not None else -1.0)
            for row in timed_batches(run, loader.loader_id) if row.stride == 1 and row.task >= 0]  # fmt: skip


def _nth_of_worker(by_task: dict[int, tuple[float, int, float, int, float]]) -> dict[int, int]:
    """Each batch's place among its worker's batches of the epoch, in the order the worker built them."""
    seen: dict[int, int] = {}
    out = {}
    for task, (_, worker, _, _, _) in sorted(by_task.items(), key=lambda item: item[1][0]):
        out[task] = seen.get(worker, 0)
        seen[worker] = out[task] + 1
    return out


def _queued(build: float, queued: float) -> bool:
    """Whether the holder's batch was slow because its worker waited for a core (its own schedstat clock): the
    machine's other work, not the batch's samples, and in_order=False would not make that core free."""
    return queued >= STALL_SHARE * build


class _Busy:
    """One worker's building intervals, to ask how long it sat idle inside a window of its active time."""

    def __init__(self, rows: list[Row]) -> None:
        spans = sorted((done - build, done) for done, _, _, build, _, _ in rows)
        self.starts = [a for a, _ in spans]
        self.spans = spans

    def idle(self, lo: float, hi: float) -> float:
        if not self.spans or hi <= self.spans[0][0] or lo >= self.spans[-1][1]:
            return 0.0  # not started yet, or gone: not a worker waiting for an index
        lo, hi = max(lo, self.spans[0][0]), min(hi, self.spans[-1][1])
        busy = 0.0
        for a, b in self.spans[max(0, bisect.bisect_right(self.starts, lo) - 1) :]:
            if a >= hi:
                break
            busy += max(0.0, min(b, hi) - max(a, lo))
        return max(0.0, hi - lo - busy)


def head_of_line(run: RunData, loader: LoaderRecord) -> HeadOfLine | None:
    """The replay over every epoch whose batches were timed from its first on; None with fewer than MIN_BATCHES
    replayed past the first round (start-up: every worker's first batch is done at about the same time)."""
    nw = loader.num_workers
    if not nw or nw < 2:
        return None
    rows = _rows(run, loader)
    busy = {w: _Busy([r for r in rows if r[2] == w]) for w in {r[2] for r in rows}}
    starts = sorted(e.t_start for e in loader.epochs)
    result = HeadOfLine(0, 0.0, 0.0, {}, [])
    slow: list[tuple[float, int, int, int]] = []
    for i, begin in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else float("inf")
        # batch numbers start again at 0 each epoch: an epoch's batches are the ones done inside it
        by_task = {task: (done, w, build, first, queued) for done, task, w, build, first, queued in rows
                   if begin <= done < end}  # fmt: skip
        nth = _nth_of_worker(by_task)
        ready = sorted(by_task)
        tasks = ready[: next((k for k, task in enumerate(ready) if task != k), len(ready))]
        delivered = by_task[tasks[0]][0] if tasks else 0.0
        for k in range(1, len(tasks)):
            done, holder, build, first, queued = by_task[tasks[k]]
            now = max(delivered, done)
            if k >= nw and now > delivered:  # past the first round, and the loop waited for this batch
                result.wait_s += now - delivered
            # The order is to blame only past the holder's warm-up, for a batch its samples made slow; and only while
            # the holder builds it: a wait with every worker idle is the hand-over's (worker_cpu.HAND_OVER).
            samples_made_it_slow = nth[tasks[k]] >= WARMUP_BATCHES and not _queued(build, queued)
            if k >= nw and now > delivered and samples_made_it_slow:
                others = [busy[w].idle(max(delivered, done - build), now) for w in busy if w != holder]
                blocked = sum(others) / max(1, nw - 1)  # the others' mean idle time while the loop waited
                result.blocked_s += blocked
                result.held_s[holder] = result.held_s.get(holder, 0.0) + blocked
            if k >= nw:
                result.batches += 1
                result.build_s.append(build)
                if samples_made_it_slow:  # the batches named are the ones whose samples may be expensive
                    slow.append((build, holder, tasks[k], first))
            delivered = now
    if result.batches < MIN_BATCHES:
        return None
    slow.sort(reverse=True)
    result.slowest = [{"worker": w, "batch": b, "build_s": round(s, 4), "first_index": f}
                      for s, w, b, f in slow[:SLOW_SHOWN]]  # fmt: skip
    return result
