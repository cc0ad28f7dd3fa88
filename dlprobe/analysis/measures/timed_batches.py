"""The batches each DataLoader worker timed itself (`worker_batches` events), read once per loader for every analyzer
that uses them: the workers' busy share (worker_cpu), their CPU/queued/blocked split (fetch_timing) and the in-order
replay (head_of_line)."""

from __future__ import annotations

from dataclasses import dataclass

from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import EV_WORKER_BATCHES

_BASE_LEN = 5  # [task, start - t0, fetch_s, collate_s, first index]
_CLOCKS_LEN = 8  # + [fetch_cpu_s, collate_cpu_s, queued_s] (queued -1: schedstat unreadable), since the worker clocks


@dataclass(frozen=True)
class TimedBatch:
    """One row: a batch a worker built, or with stride k one kept for k batches."""

    writer: int  # the worker's pid (a worker thread's native id): worker ids repeat across epochs
    worker: int
    stride: int
    task: int  # the batch's number in the loader's order; -1 where the torch's worker loop does not name it
    start: float  # when the fetch began (seconds since the epoch)
    fetch_s: float
    collate_s: float
    first: int  # the sampler's first index, or the stream position
    clocks: tuple[float, float, float] | None  # fetch CPU, collate CPU, queued; None on rows written before them

    @property
    def build_s(self) -> float:
        return self.fetch_s + self.collate_s


def timed_batches(run: RunData, loader_id: int) -> list[TimedBatch]:
    """Every well-formed row of the loader's workers, in the order written; parsed once per loader and events seen."""
    key = (loader_id, len(run.events))
    cached = run.timed_batches_cache.get(key)
    if cached is None:
        cached = run.timed_batches_cache[key] = list(_parse(run, loader_id))
    return cached


def _parse(run: RunData, loader_id: int) -> list[TimedBatch]:
    out = []
    for event in run.events:
        if event.get("ev") != EV_WORKER_BATCHES or event.get("loader") != loader_id:
            continue
        worker, t0, stride = event.get("worker"), event.get("t0"), event.get("stride") or 1
        if not isinstance(worker, int) or not isinstance(t0, (int, float)) or not isinstance(stride, int):
            continue
        writer = event.get("tid") or event.get("pid") or worker
        for row in event.get("rows") or []:
            if not (isinstance(row, list) and len(row) >= _BASE_LEN and _numbers(row[:_BASE_LEN])):
                continue
            task, start, fetch_s, collate_s, first = row[:_BASE_LEN]
            extra = row[_BASE_LEN:_CLOCKS_LEN]
            clocks = (extra[0], extra[1], extra[2]) if len(extra) == 3 and _numbers(extra) else None
            row_start = t0 + start
            out.append(TimedBatch(writer, worker, stride, int(task), row_start, fetch_s, collate_s, int(first), clocks))
    return out


def _numbers(values: list[object]) -> bool:
    return all(isinstance(v, (int, float)) for v in values)
