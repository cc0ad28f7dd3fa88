"""Synthetic runs for unit tests of the pure analysis code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlprobe.analysis.run.model import Epoch, LoaderRecord, ProcessRecord, RunData, Series, SystemSeries

MiB = 1024 * 1024


def series(uss: list[int], rss: list[int], t0: float = 100.0) -> Series:
    n = len(uss)
    return Series(t=[t0 + i for i in range(n)], rss=list(rss), uss=list(uss), pss=list(uss), swap=[0] * n)


def cpu_series(t0: float, t1: float, cpu_share: float, runq_share: float | None = 0.0, uss: int = 10 * MiB,
               every: float = 0.25) -> Series:  # fmt: skip
    """A process read every `every` s from t0 to t1 that spent these shares of the time on a CPU and queued for one
    (None: no schedstat), as the sampler's cumulative cpu/runq readings say it."""
    t = [t0 + i * every for i in range(int((t1 - t0) / every) + 1)]
    n = len(t)
    s = Series(t=t, rss=[uss] * n, uss=[uss] * n, pss=[uss] * n, swap=[0] * n)
    s.cpu = [round(cpu_share * (x - t0), 2) for x in t]
    s.runq = [None if runq_share is None else round(runq_share * (x - t0), 3) for x in t]
    return s


def loader(
    loader_id: int = 0,
    num_workers: int = 2,
    start_method: str | None = "fork",
    suspects: list[dict[str, Any]] | None = None,
    est_bytes: int = 0,
    batch_bytes: int | None = None,
    prefetch_factor: int | None = 2,
    epochs: list[Epoch] | None = None,
) -> LoaderRecord:
    config = {
        "num_workers": num_workers,
        "prefetch_factor": prefetch_factor,
        "batch_size": 8,
        "dataset": {"type": "x.DS", "len": 100, "suspects": suspects or [], "est_bytes": est_bytes},
    }
    record = LoaderRecord(loader_id, config, 100.0, start_method, epochs or [])
    if batch_bytes is not None:
        record.batch_info = {"bytes": batch_bytes, "leaves": []}
    return record


def worker(pid: int, worker_id: int, s: Series, loader_id: int = 0) -> ProcessRecord:
    return ProcessRecord(pid, "worker", loader_id, worker_id, "pt_data_worker", 1, s)


def parent(uss: int, pid: int = 1) -> ProcessRecord:
    """The training process, flat at `uss`: what cow-growth weighs the workers' copies against."""
    return ProcessRecord(pid, "main", comm="python", series=series([uss] * 3, [uss + 200 * MiB] * 3))


def run(
    loaders: list[LoaderRecord],
    processes: list[ProcessRecord],
    system: SystemSeries | None = None,
    events: list[dict[str, Any]] | None = None,
    mem_total: int = 24 * 1024 * MiB,
) -> RunData:
    meta = {"script": "train.py", "argv": [], "started_at": 100.0, "machine": {"mem_total": mem_total}}
    result = {"exit_code": 0, "ended_at": 110.0}
    return RunData(Path("/nonexistent"), meta, result, loaders, processes, system or SystemSeries(), events or [])


def rank_events(
    pid: int,
    rank: int | None,
    workers: list[int],
    batches: int = 10,
    ended: bool = True,
    world_size: int | None = 2,
    loader_id: int = 0,
    dataset_len: int = 160,
    digests: list[str] | None = None,
    host: str = "node-a",
    node_rank: int | None = 0,
) -> list[dict[str, Any]]:
    """The events one probed process of a job writes: its identity, a loader, one epoch with its workers."""
    events: list[dict[str, Any]] = [
        {"ev": "process", "t": 100.0, "pid": pid, "ppid": 1, "rank": rank, "local_rank": rank,
         "world_size": world_size, "node_rank": node_rank, "host": host, "argv": ["train.py"]},
        {"ev": "loader", "t": 100.5, "pid": pid, "loader": loader_id, "num_workers": len(workers), "batch_size": 8,
         "start_method": "fork", "prefetch_factor": 2,
         "dataset": {"type": "x.DS", "len": dataset_len, "suspects": [], "est_bytes": 0}},
        {"ev": "epoch", "t": 101.0, "pid": pid, "loader": loader_id, "epoch": 1, "iter_s": 0.1,
         "workers": [{"pid": w, "worker_id": i, "memory": None} for i, w in enumerate(workers)]},
    ]  # fmt: skip
    if batches:
        events.append({"ev": "batches", "t": 105.0, "pid": pid, "loader": loader_id, "epoch": 1,
                       "waits": [0.01] * batches, "total": batches})  # fmt: skip
    if digests is not None:
        events.append({"ev": "dupes", "t": 105.0, "pid": pid, "loader": loader_id, "epoch": 1, "samples": 80,
                       "unique": 80, "duplicates": 0, "digests": digests})  # fmt: skip
    if ended:
        events.append({"ev": "epoch_end", "t": 106.0, "pid": pid, "loader": loader_id, "epoch": 1,
                       "batches": batches})  # fmt: skip
    return events


def rank_processes(pid: int, workers: list[int], worker_uss: list[int], main_uss: int = 200 * MiB,
                   ppid: int = 1) -> list[ProcessRecord]:  # fmt: skip
    """A rank's training process and its workers as the sampler saw them (USS grows as given, RSS flat)."""
    n = len(worker_uss)
    procs = [ProcessRecord(pid, "other", comm="python", ppid=ppid, series=series([main_uss] * n, [main_uss] * n))]
    for w in workers:
        procs.append(ProcessRecord(w, "other", comm="pt_data_worker", ppid=pid,
                                   series=series(list(worker_uss), [worker_uss[0]] * n)))  # fmt: skip
    return procs


def job_run(
    events: list[dict[str, Any]],
    processes: list[ProcessRecord],
    usable_cores: int = 2,
    mem_total: int = 24 * 1024 * MiB,
    node_rank: int | None = None,
    path: str = "/nonexistent",
) -> RunData:
    """A run directory of a job: several writers in one events list, the whole tree's samples."""
    meta = {"script": "torchrun", "argv": [], "started_at": 100.0, "target_pid": 1, "node_rank": node_rank,
            "machine": {"mem_total": mem_total, "usable_cores": usable_cores}}  # fmt: skip
    launcher = ProcessRecord(1, "main", comm="torchrun", series=series([50 * MiB] * 3, [50 * MiB] * 3))
    result = {"exit_code": 0, "ended_at": 110.0}
    return RunData(Path(path), meta, result, [], [launcher, *processes], SystemSeries(), events)  # type: ignore[arg-type]
