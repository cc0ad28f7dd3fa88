"""A worker's memory as measured and projected: growth by kind of page, a load at start, the epoch's clock and the
projection to the epoch's end. Numbers only, no finding: cow-growth, the worker advice (throughput), start-method,
`tune`, the job view and the report all read their worker figures here (one home, where finding modules once
imported each other's private helpers)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from itertools import zip_longest
from typing import Any

from dlprobe.analysis.measures.stats import growth, metric_summary
from dlprobe.analysis.measures.timed_batches import timed_batches
from dlprobe.analysis.run.model import LoaderRecord, ProcessRecord, RunData, Series
from dlprobe.loader_model.memory_growth import (
    Ceiling,
    WorkerProjection,
    limit_ceiling,
    linear_clock,
    project_worker_by_kind,
    project_worker_uss,
    tightest_limit,
    worker_end_bytes,
)
from dlprobe.rundir.schema import EV_BATCHES, EV_PROCESS
from dlprobe.units import MiB

LOAD_MIN_RISE = 16 * MiB  # a rise worth a load at start (as cow-growth's floor): a few arena pages have its shape too

# "Loaded once per worker": 90% of the rise reached within the first half of the life the readings span, and at
# least 80% of it kept at every later reading (LOADED_FLAT_READINGS of them at least, so "stayed" was seen).
LOADED_EARLY_SHARE = 0.5


LOADED_FLAT_READINGS = 2


# Workers fork from one parent at one size, so the same data loaded in each leaves their peaks this close
# (a share of the largest rise).
SAME_LOAD_PEAK_SPREAD = 0.25


def _cow_series(series: Series) -> list[int]:
    """Private_Dirty's rise since the first reading that new memory does not explain, per reading.

    A new allocation raises Private_Dirty and Anonymous alike, so what is left rises by copy-on-write (an anonymous
    page the parent already had turning private). Anonymous falling (the worker unmapping shared pages it never
    touched, say a freed arena of the parent's) is not credited: it would look like a copy while nothing was copied.
    /dev/shm pages the parent wrote count as Private_Dirty while only this worker maps them (then their Pss_Shmem is
    their full size), so Pss_Shmem's rise is taken off too; and so is Pss_File's: a file the parent has just written
    (np.save before the loader) is dirty page cache until writeback, so a worker that maps and reads it alone counts
    it as Private_Dirty until the kernel writes it back (seen under load: 64 MiB for half a second). At worst that
    hides copies as large as the worker's shared tmpfs and mapped file pages' share, never raises a false alarm."""
    rows = [
        (d, a, sh or 0, f or 0)
        for d, a, sh, f in zip_longest(series.private_dirty, series.anon, series.pss_shmem, series.pss_file)
        if d is not None and a is not None
    ]
    if not rows:
        return []
    d0, a0, sh0, f0 = rows[0]
    return [(d - d0) - max(0, a - a0) - max(0, sh - sh0) - max(0, f - f0) for d, a, sh, f in rows]


def kind_growth(series: Series) -> dict[str, int] | None:
    """Growth by kind of page, or None for runs recorded before dlprobe read smaps_rollup's kinds."""
    cow = _cow_series(series)
    if len(cow) < 2:
        return None
    return {
        "anon_growth_bytes": growth(series, "anon"),
        "cow_bytes": max(0, max(cow)),
        "private_dirty_growth_bytes": growth(series, "private_dirty"),
        "pss_file_growth_bytes": growth(series, "pss_file"),
        "pss_shmem_growth_bytes": growth(series, "pss_shmem"),
    }


def loaded_at_start(series: Series, built_at: float | None = None) -> bool:
    """Memory rose to its peak early in the worker's life and stayed there: the worker loaded something once
    (np.load in worker_init_fn, a lazy load on the first sample), unlike a cache that keeps growing. Read from RSS,
    which the sampler reads every tick (a worker whose memory stopped moving gets few full readings); it is called
    only where Anonymous rose, so RSS moves with it.

    Decided from the shape of the readings, not from when they landed: a busy machine slows the load and leaves
    gaps between readings, so the rise counts as done halfway between the last reading below 90% and the first one
    above (not at the late reading that saw it), and it must be done within the first half of the readings' span,
    a bound that leaves a load several times slower than usual its place and a steady ramp (done only at its end)
    outside.

    Or, where the worker's first batch was timed (`built_at`), from that: its memory had risen by then and stayed
    risen after. worker_init_fn and a load in the first sample are over once the first batch is built, and a machine
    busy enough to stretch the load into the second half of a short run still builds the first batch after it."""
    return load_done_at(series) is not None or loaded_before(series, built_at)


def loaded_before(series: Series, built_at: float | None, metric: str = "rss") -> bool:
    """The worker's memory reached 90% of its rise by `built_at` (its first batch built) and kept 80% of it at every
    later reading, LOADED_FLAT_READINGS of them at least: a load before the batches, not growth with them. The first
    reading after `built_at` counts as "by then": the sampler reads a worker every quarter second or so, so a load
    done just before the batch shows only in the next reading."""
    values = sorted(series.values(metric))
    if built_at is None or len(values) < 2:
        return False
    v0 = values[0][1]
    rise = max(v for _, v in values) - v0
    first_after = next((i for i, (t, _) in enumerate(values) if t > built_at), len(values))
    by_then, after = values[: first_after + 1], values[first_after + 1 :]
    return (
        rise > 0
        and max(v for _, v in by_then) - v0 >= 0.9 * rise
        and len(after) >= LOADED_FLAT_READINGS
        and all(v - v0 >= 0.8 * rise for _, v in after)
    )


def first_batch_built(run: RunData, loader_id: int, pid: int) -> float | None:
    """When a worker (by pid) finished the first batch it timed (its start + fetch + collate), or None."""
    return min((row.start + row.build_s for row in timed_batches(run, loader_id) if row.writer == pid), default=None)


def load_done_at(series: Series, metric: str = "rss") -> float | None:
    """When a worker's load at start was done (the shape `loaded_at_start` describes), or None where its memory
    did not rise that way: what came after is the worker's steady part."""
    values = sorted(series.values(metric))
    if len(values) < 2 + LOADED_FLAT_READINGS:
        return None
    (t0, v0), t_end = values[0], values[-1][0]
    rise = max(v for _, v in values) - v0
    if rise <= 0 or t_end <= t0:
        return None
    done = next(i for i, (_, v) in enumerate(values) if v - v0 >= 0.9 * rise)  # > 0: the first reading is v0
    done_at = (values[done - 1][0] + values[done][0]) / 2
    after = values[done:]
    kept = all(v - v0 >= 0.8 * rise for _, v in after)
    early = done_at - t0 <= LOADED_EARLY_SHARE * (t_end - t0)
    return done_at if kept and len(after) > LOADED_FLAT_READINGS and early else None


def same_load(rows: list[dict[str, Any]]) -> bool:
    """Every worker loaded the same data once: each one that rose did so at start, and all peak at about the same
    size. Peaks, not rises: a worker first read midway through its load (the sampler learns of workers late on a
    busy machine) shows only part of its rise, or none at all, but the same peak."""
    rise = max((r["anon_growth_bytes"] for r in rows), default=0)
    peaks = [r["rss_peak_bytes"] for r in rows]
    if len(rows) < 2 or rise <= 0 or None in peaks:
        return False
    still = (1 - SAME_LOAD_PEAK_SPREAD) * rise  # rose less than this: already loaded when first read, if at all
    loaded = all(r.get("loaded_at_start") or r["rss_growth_bytes"] < still for r in rows)
    return loaded and max(peaks) - min(peaks) <= SAME_LOAD_PEAK_SPREAD * rise


def worker_growth_rows(run: RunData, loader: LoaderRecord) -> list[dict[str, Any]]:
    rows = []
    for proc in sorted(run.workers(loader.loader_id), key=lambda p: p.worker_id or 0):
        if proc.memory_unread is not None:  # unknown, not unchanged: probe-degraded names it
            continue
        uss = metric_summary(proc.series, "uss")
        rss = metric_summary(proc.series, "rss")
        row: dict[str, Any] = {
            "pid": proc.pid,
            "worker_id": proc.worker_id,
            "uss_start_bytes": uss["start"],
            "uss_peak_bytes": uss["peak"],
            "uss_growth_bytes": growth(proc.series, "uss"),
            "pss_growth_bytes": growth(proc.series, "pss"),
            "rss_growth_bytes": growth(proc.series, "rss"),
            "rss_peak_bytes": rss["peak"],
        }
        kinds = kind_growth(proc.series)
        built = first_batch_built(run, loader.loader_id, proc.pid)
        if kinds is not None:
            row.update(kinds, loaded_at_start=loaded_at_start(proc.series, built))
        row["projection"] = worker_projection(run, loader, proc).evidence()
        rows.append(row)
    return rows


def epoch_clock(run: RunData, loader: LoaderRecord, proc_series: Series) -> tuple[float, Any]:
    """(the share of the epoch done, a function from a reading's time to the share done then), read from the
    loader's `batches` events (batches so far, when each group was reported), not from the clock: a worker's early
    batches are slow while it copies, so half the time is not half the epoch. A worker alive before the epoch that
    runs now (persistent workers) lived through a whole epoch, and so does every worker once the last epoch ended:
    1, nothing to project."""
    fraction = epoch_fraction(loader, world_size(run))
    times = proc_series.t
    if fraction >= 1.0 or not loader.epochs or not times:
        return 1.0, lambda _t: 1.0
    epoch = loader.epochs[-1]
    if min(times) < epoch.t_start and any(e.t_end is not None for e in loader.epochs):
        return 1.0, lambda _t: 1.0
    marks = [(epoch.t_start + epoch.iter_s, 0)] + sorted(
        (float(e["t"]), int(e["total"]))
        for e in run.events
        if e.get("ev") == EV_BATCHES and e.get("loader") == loader.loader_id and e.get("epoch") == epoch.epoch
        and (loader.writer is None or e.get("pid") in (None, loader.writer)) and isinstance(e.get("total"), int)
    )  # fmt: skip
    if len(marks) < 2 or not epoch.batches:  # no batch reported with its time: the clock from start to last batch
        return fraction, linear_clock(marks[0][0], epoch.t_last_batch or max(times), fraction)
    per_batch = fraction / epoch.batches

    def share_at(t: float) -> float:
        i = bisect_right(marks, (t, math.inf))
        if i == 0:
            return 0.0
        if i == len(marks):
            return min(fraction, marks[-1][1] * per_batch)
        (ta, na), (tb, nb) = marks[i - 1], marks[i]
        return (na + (nb - na) * (t - ta) / (tb - ta) if tb > ta else nb) * per_batch

    return fraction, share_at


def parent_anon_at(run: RunData, t_fork: float) -> Ceiling | None:
    """What a worker forked at `t_fork` could copy at most: the parent's anonymous memory then (its last reading
    before the fork, else its first), or, in runs recorded without page kinds, the parent's USS at its peak."""
    main = next((p for p in run.processes if p.role == "main"), None)
    if main is None:
        return None
    anon = main.series.values("anon")
    if anon:
        before = [v for t, v in anon if t <= t_fork]
        return Ceiling(before[-1] if before else anon[0][1], "the parent's anonymous memory at fork")
    uss = [v for _, v in main.series.values("uss")]
    return Ceiling(max(uss), "the parent's private memory (USS)") if uss else None


def worker_projection(run: RunData, loader: LoaderRecord, proc: ProcessRecord) -> WorkerProjection:
    """A worker's growth projected to the end of its epoch by kind of page (loader_model WorkerProjection), on the
    loader's epoch clock (its `batches` events)."""
    measured_at, share_at = epoch_clock(run, loader, proc.series)
    return project_worker(run, loader.loader_id, proc, measured_at, share_at)


def worker_end(
    run: RunData, loader_id: int, proc: ProcessRecord, measured_at: float, share_at: Callable[[float], float]
) -> tuple[int, int, WorkerProjection] | None:
    """(a worker's private memory at the end of its epoch, its USS peak so far, the projection behind it): the one
    per-worker figure of `run`'s advice, `tune`'s trials and the job's node totals (memory_growth.worker_end_bytes on
    project_worker); None for a worker whose USS was never read."""
    uss = metric_summary(proc.series, "uss")
    if uss["peak"] is None:
        return None
    model = project_worker(run, loader_id, proc, measured_at, share_at)
    return worker_end_bytes(uss["start"] or 0, uss["peak"], model), uss["peak"], model


def loader_worker_end(run: RunData, loader: LoaderRecord, proc: ProcessRecord) -> tuple[int, int, WorkerProjection] | (
        None):  # fmt: skip
    """worker_end on the loader's epoch clock (its `batches` events), as worker_projection reads it."""
    measured_at, share_at = epoch_clock(run, loader, proc.series)
    return worker_end(run, loader.loader_id, proc, measured_at, share_at)


def project_worker(
    run: RunData, loader_id: int, proc: ProcessRecord, measured_at: float, share_at: Callable[[float], float]
) -> WorkerProjection:
    """A worker's growth projected to the end of its epoch (`measured_at`: the share done; `share_at`: the share done
    at a reading's time), from its start: when it built its first batch, where timed (worker_init_fn and a load in the
    first sample are over by then), or when a load at start was done. `run`'s advice reads it on the loader's epoch,
    `tune` on a trial's (tune/results.py): one projection (loader_model/memory_growth.py)."""
    series = proc.series
    built = first_batch_built(run, loader_id, proc.pid)
    limit = limit_ceiling(memory_limit(run))
    rows = [
        (t, d, a, sh or 0, f or 0)
        for t, d, a, sh, f in zip(
            series.t, series.private_dirty, series.anon, series.pss_shmem, series.pss_file, strict=False
        )  # fmt: skip
        if d is not None and a is not None
    ]
    if len(rows) < 2:  # no page kinds: USS growth, as new memory (RSS never decides it)
        uss = sorted(series.values("uss"))
        start = _start_index([t for t, _ in uss], built, _load_done(series, "uss"))
        return project_worker_uss([(share_at(t), v) for t, v in uss], start, measured_at, limit)
    times = [r[0] for r in rows]
    start = _start_index(times, built, _load_done(series, "anon"))
    return project_worker_by_kind([(share_at(t), d, a, sh, f) for t, d, a, sh, f in rows], start, measured_at,
                                  parent_anon_at(run, times[0]), limit)  # fmt: skip


def _load_done(series: Series, metric: str) -> float | None:
    """When a load at start was done (load_done_at), counted only for a rise worth a load: a few pages of arena
    that come and go have the same shape and would move the worker's start later into its growth."""
    values = [v for _, v in series.values(metric)]
    if not values or max(values) - values[0] < LOAD_MIN_RISE:
        return None
    return load_done_at(series, metric)


def _start_index(times: list[float], *marks: float | None) -> int:
    """The first reading at or after the latest known mark (the first batch built, a load at start done), or 0."""
    known = [m for m in marks if m is not None]
    if not known or not times:
        return 0
    return next((i for i, t in enumerate(times) if t >= max(known)), len(times) - 1)


def memory_limit(run: RunData) -> tuple[int, str] | None:
    """The tightest memory limit the run had, and its name: the cgroup's limit, MemTotal, or the most memory the
    machine had available (MemAvailable) while it ran. None when none of them was read."""
    machine = run.meta.get("machine") or {}
    available = [a for a in run.system.available if a is not None]
    return tightest_limit(run.system.cgroup_limit, machine.get("mem_total"), max(available) if available else None)


def epoch_fraction(loader: LoaderRecord, world_size: int = 1) -> float:
    """How much of an epoch the loader has done: 1 once an epoch ended; else batches so far over the batches an
    epoch has (a completed epoch's, or the dataset split over the ranks)."""
    epochs = loader.epochs
    if not epochs or epochs[-1].t_end is not None:
        return 1.0
    ended = [e.batches for e in epochs if e.t_end is not None]
    if ended:
        per_epoch = max(ended)
    else:
        length, batch = loader.dataset.get("len"), loader.config.get("batch_size")
        if not length or not batch:
            return 1.0
        per_epoch = math.ceil(length / world_size / batch)
    return min(1.0, max(epochs[-1].batches, 1) / per_epoch) if per_epoch else 1.0


def row_growth(row: dict[str, Any]) -> int:
    """What cow-growth weighs a worker by: copied plus new anonymous memory, or USS growth in older runs."""
    if "cow_bytes" in row:
        return int(row["cow_bytes"]) + int(row.get("anon_growth_bytes") or 0)
    return int(row.get("uss_growth_bytes") or 0)


def world_size(run: RunData) -> int:
    sizes = [e.get("world_size") for e in run.events if e.get("ev") == EV_PROCESS]
    return int(sizes[-1] or 1) if sizes else 1
