"""trace.json: a run (or a job's runs) as Trace Event Format, JSON-ready, for Perfetto and chrome://tracing."""

from __future__ import annotations

import math
from typing import Any

from dlprobe import __version__
from dlprobe.analysis.job.model import RankView, is_job, split_job
from dlprobe.analysis.report.schema import FindingEntry, Report
from dlprobe.analysis.run.labels import thread_worker_track, worker_track
from dlprobe.analysis.run.model import RunData, Series
from dlprobe.rundir.schema import (
    EV_BATCHES,
    EV_EPOCH,
    EV_LOADER_ERROR,
    EV_SCRIPT_ERROR,
    EV_STOP,
    EV_WORKER_BATCHES,
    WORKER_BATCH_CAP,
)
from dlprobe.units import MiB

# Slices (or counter readings) one track keeps at most; a track with more keeps every k-th, evenly, so a long
# run's trace stays a few MB (k is listed in otherData.downsampled).
TRACK_CAP = 10_000
TID_SPAN = 10_000  # tracks per process at most: loader N's waits 1 + N, its epochs 1001 + N
EVENTS_TID = 0  # per process: the thread that carries its instant events
IN_FLIGHT_TID = 999  # per process: what its in-flight slot says it was still doing at the end
LOOP_BUSY = ("waiting-for-batch", "creating-iterator")
FETCH_BUSY = ("getitem", "collate", "worker_init_fn")
# Counters of one process: memory by kind of page (PSS, from smaps_rollup) and its own / resident memory.
MEMORY_COUNTERS = (
    ("PSS by kind (MiB)", (("anon", "pss_anon"), ("file", "pss_file"), ("shmem", "pss_shmem"))),
    ("USS / RSS (MiB)", (("uss", "uss"), ("rss", "rss"))),
)


def _tid(tpid: int, tid: int) -> int:
    """A thread id of its own per process: Perfetto takes tid 0, and a tid equal to a pid, for that process's main
    thread and would merge such a track with another."""
    return tpid * TID_SPAN + tid


class _Trace:
    """The events being built, the processes named so far, and what was downsampled."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.events: list[dict[str, Any]] = []
        self.meta: list[dict[str, Any]] = []
        self.downsampled: dict[str, int] = {}
        self.next_id = 1
        self.by_pid: dict[tuple[int, int], int] = {}  # (node, real pid) -> trace pid

    def ts(self, t: float) -> float:
        return round((t - self.origin) * 1e6, 1)

    def process(self, node: int, pid: int, name: str) -> int:
        tpid = self.next_id
        self.next_id += 1
        self.by_pid.setdefault((node, pid), tpid)
        self.meta.append({"ph": "M", "name": "process_name", "pid": tpid, "tid": 0, "ts": 0, "args": {"name": name}})
        self.meta.append(
            {"ph": "M", "name": "process_sort_index", "pid": tpid, "tid": 0, "ts": 0, "args": {"sort_index": tpid}}
        )
        self.thread(tpid, EVENTS_TID, "events")
        return tpid

    def thread(self, tpid: int, tid: int, name: str) -> None:
        args = {"name": name}
        self.meta.append({"ph": "M", "name": "thread_name", "pid": tpid, "tid": _tid(tpid, tid), "ts": 0, "args": args})
        self.meta.append(
            {"ph": "M", "name": "thread_sort_index", "pid": tpid, "tid": _tid(tpid, tid), "ts": 0,
             "args": {"sort_index": tid}}
        )  # fmt: skip

    def instant(self, tpid: int, t: float, name: str, args: dict[str, Any] | None = None) -> None:
        self.events.append(
            {
                "ph": "i",
                "s": "t",
                "name": name,
                "pid": tpid,
                "tid": _tid(tpid, EVENTS_TID),
                "ts": self.ts(t),
                "args": args or {},
            }
        )

    def slice(self, tpid: int, tid: int, t: float, end: float, name: str, args: dict[str, Any]) -> None:
        # dur from the rounded ends: a child ending with its parent must not stick out by a rounding (Perfetto
        # drops a slice that overlaps its parent's end)
        ts = self.ts(t)
        dur = round(max(self.ts(end) - ts, 0.0), 1)
        event = {"ph": "X", "name": name, "pid": tpid, "tid": _tid(tpid, tid), "ts": ts, "dur": dur, "args": args}
        self.events.append(event)

    def capped(self, label: str, items: list[Any]) -> list[Any]:
        if len(items) <= TRACK_CAP:
            return items
        stride = math.ceil(len(items) / TRACK_CAP)
        self.downsampled[label] = stride
        return items[::stride]


def _mib(value: int | None) -> float:
    return round((value or 0) / MiB, 2)


def _counters(trace: _Trace, tpid: int, label: str, series: Series) -> None:
    for name, fields in MEMORY_COUNTERS:
        columns = [getattr(series, metric) for _, metric in fields]
        rows = []
        for i, t in enumerate(series.t):
            values = [column[i] if i < len(column) else None for column in columns]
            # only what was read: USS and PSS by kind come from smaps_rollup, read more rarely than RSS (a
            # missing value drawn as 0 would be a false drop)
            args = {key: _mib(v) for (key, _), v in zip(fields, values, strict=True) if v is not None}
            if args:
                rows.append((t, args))
        for t, args in trace.capped(f"{label}: {name}", rows):
            trace.events.append({"ph": "C", "name": name, "pid": tpid, "ts": trace.ts(t), "args": args})


def _waits(trace: _Trace, tpid: int, label: str, view: RankView) -> None:
    """One slice per wait of the loop for a batch. The hooks send waits in chunks of up to 0.25 s with the chunk's
    time (just after its last wait): the waits are laid out from the previous chunk (or the epoch's start), the
    loop's time between them spread evenly, so a slice's length is exact and its start within its chunk."""
    for lo in view.run.loaders:
        tid = 1 + lo.loader_id
        trace.thread(tpid, tid, f"loader {lo.loader_id} waits")
        rows: list[tuple[float, float, int, int]] = []  # start, wait, epoch, batch in epoch
        previous: float | None = None
        floor = 0.0
        batch = 0
        epoch_number = None
        starts = {e.epoch: e.t_start + e.iter_s for e in lo.epochs}
        for ev in view.run.events:
            if ev.get("ev") != EV_BATCHES or ev.get("loader") != lo.loader_id or ev.get("pid") != view.pid:
                continue
            waits = [float(w) for w in ev.get("waits") or []]
            if ev.get("epoch") != epoch_number:
                epoch_number, batch = ev.get("epoch"), 0
                previous = starts.get(epoch_number) if isinstance(epoch_number, int) else None
            end = float(ev["t"])
            span = end - previous if previous is not None else sum(waits)
            gap = max(0.0, (span - sum(waits)) / len(waits)) if waits else 0.0
            # never before the previous slice's end: a chunk whose waits exceed its span overlaps no other one
            cursor = max(end - sum(waits) - gap * len(waits), floor)
            for wait in waits:
                cursor += gap
                rows.append((cursor, wait, int(epoch_number or 0), batch))
                cursor += wait
                batch += 1
            previous, floor = end, cursor
        for start, wait, epoch, number in trace.capped(f"{label} loader {lo.loader_id} waits", rows):
            trace.slice(tpid, tid, start, start + wait, "wait", {"epoch": epoch, "batch": number})
        for e in lo.epochs:
            ended = e.t_end or e.t_last_batch
            if ended is not None:
                args = {"loader": lo.loader_id, "batches": e.batches}
                trace.slice(tpid, tid + 1000, e.t_start, ended, f"epoch {e.epoch}", args)
        if lo.epochs:
            trace.thread(tpid, tid + 1000, f"loader {lo.loader_id} epochs")


def _worker_slices(
    trace: _Trace, tpid: int, label: str, events: list[dict[str, Any]], slot: dict[str, Any] | None
) -> None:
    """A slice per batch the worker built (named by its number in the iterator's order), its collate inside it: the
    rows its events sent, and the last ones its in-flight slot kept (a killed or stuck worker never sent those)."""
    rows = []
    for ev in events:
        t0 = float(ev.get("t0") or 0.0)
        for task, offset, fetch_s, collate_s, first, *_ in ev.get("rows") or []:
            rows.append((t0 + offset, float(fetch_s), float(collate_s), int(task), first))
    sent: dict[int, list[float]] = {}  # task -> starts sent (the events round them to a microsecond)
    for row in rows:
        sent.setdefault(row[3], []).append(row[0])
    for task, start, collate, end, first in (slot or {}).get("recent") or []:
        if start and not any(abs(start - other) < 1e-5 for other in sent.get(int(task), [])):
            rows.append((start, collate - start, end - collate, int(task), first))
    if not rows:
        return
    rows.sort(key=lambda row: row[0])
    trace.thread(tpid, 1, "batches")
    for start, fetch_s, collate_s, task, first in trace.capped(f"{label} batches", rows):
        name = f"batch {task}" if task >= 0 else "batch"
        args = {"task": task, "first_index": first, "fetch_ms": round(fetch_s * 1e3, 3),
                "collate_ms": round(collate_s * 1e3, 3)}  # fmt: skip
        end = start + fetch_s + collate_s
        trace.slice(tpid, 1, start, end, name, args)
        trace.slice(tpid, 1, start + fetch_s, end, "collate", {"task": task})


def _in_flight(trace: _Trace, tpid: int, slot: dict[str, Any] | None, end: float) -> None:
    """What the process was still doing when the run ended (its in-flight slot): a stuck fetch, or the loop still
    waiting for a batch; the slices a hang is about, which no chunk of timings has sent."""
    if not slot:
        return
    loop = slot.get("loop") or {}
    if loop.get("state") in LOOP_BUSY and loop.get("since"):
        name = f"{loop['state']} at the end"
        if loop.get("awaited_task") is not None and loop["awaited_task"] >= 0:
            name = f"waiting for batch {loop['awaited_task']} (worker {loop.get('awaited_worker')}) at the end"
        trace.thread(tpid, IN_FLIGHT_TID, "in flight at the end")
        trace.slice(tpid, IN_FLIGHT_TID, float(loop["since"]), max(end, float(loop["since"])), name,
                    {"loader": loop.get("loader_id"), "batches": loop.get("batches")})  # fmt: skip
    if slot.get("phase") in FETCH_BUSY and slot.get("t_fetch"):
        start = float(slot["t_fetch"])
        args = {"phase": slot["phase"], "index": slot.get("index"), "indices": slot.get("indices")}
        trace.thread(tpid, IN_FLIGHT_TID, "in flight at the end")
        trace.slice(tpid, IN_FLIGHT_TID, start, max(end, start), f"{slot['phase']} of index {slot.get('index')} at "
                    "the end", args)  # fmt: skip


def _workers_of(view: RankView) -> dict[int, tuple[int, int, float]]:
    """Each worker pid of the rank: (loader id, worker id, when its epoch started it)."""
    found: dict[int, tuple[int, int, float]] = {}
    for ev in view.run.events:
        if ev.get("ev") == EV_EPOCH and ev.get("pid") == view.pid:
            for w in ev.get("workers") or []:
                if isinstance(w, dict) and isinstance(w.get("pid"), int):
                    found.setdefault(w["pid"], (int(ev.get("loader") or 0), int(w.get("worker_id") or 0), ev["t"]))
    for proc in view.run.workers():
        if proc.pid not in found and proc.series.t:
            found[proc.pid] = (proc.loader_id or 0, proc.worker_id or 0, proc.series.t[0])
    return found


def _threads_of(view: RankView) -> dict[int, tuple[int, int, float]]:
    """Each worker thread of the rank (worker_method="thread"), by native id: (loader id, worker id, its start)."""
    found: dict[int, tuple[int, int, float]] = {}
    for ev in view.run.events:
        if ev.get("ev") == EV_EPOCH and ev.get("pid") == view.pid:
            for th in ev.get("threads") or []:
                if isinstance(th, dict) and isinstance(th.get("tid"), int):
                    found.setdefault(th["tid"], (int(ev.get("loader") or 0), int(th.get("worker_id") or 0), ev["t"]))
    return found


def _rank(trace: _Trace, view: RankView, label: str) -> None:
    run, node = view.run, view.node
    series = {p.pid: p.series for p in run.processes}
    # a process outside a distributed job is labelled by its pid already ("node 1 pid 22826")
    main_name = label if label.endswith(f"pid {view.pid}") else f"{label} (pid {view.pid})"
    tpid = trace.process(node, view.pid, main_name)
    _counters(trace, tpid, main_name, series.get(view.pid, Series()))
    _waits(trace, tpid, main_name, view)
    end = _end_of([run])
    _in_flight(trace, tpid, run.inflight.get(view.pid), run.gone.get(view.pid, end))
    for ev in run.events:
        kind = ev.get("ev")
        if ev.get("pid") != view.pid or not isinstance(ev.get("t"), (int, float)):
            continue
        if kind == EV_EPOCH:
            trace.instant(tpid, ev["t"], f"epoch {ev.get('epoch')} (loader {ev.get('loader')})",
                          {"iter_s": ev.get("iter_s"), "workers": len(ev.get("workers") or [])})  # fmt: skip
        elif kind in (EV_SCRIPT_ERROR, EV_LOADER_ERROR, EV_STOP):
            trace.instant(tpid, ev["t"], kind, {k: v for k, v in ev.items() if k not in ("ev", "t", "pid")})
    for hang in run.hangs:
        trace.instant(tpid, float(hang.get("t") or 0.0), f"hang {hang.get('number')}",
                      {"waited_s": hang.get("waited_s"), "on_hang": hang.get("on_hang")})  # fmt: skip
    batches_of: dict[int, list[dict[str, Any]]] = {}  # by the worker's pid, or a worker thread's native id
    for ev in run.events:
        if ev.get("ev") == EV_WORKER_BATCHES and isinstance(ev.get("pid"), int):
            batches_of.setdefault(ev.get("tid") or ev["pid"], []).append(ev)
    for pid, (loader_id, worker_id, started) in sorted(_workers_of(view).items(), key=lambda kv: kv[1][:2] + (kv[0],)):
        prefix = "" if label == "main" else f"{label} / "
        name = prefix + worker_track(loader_id, worker_id, pid)
        wpid = trace.process(node, pid, name)
        _counters(trace, wpid, name, series.get(pid, Series()))
        _worker_slices(trace, wpid, name, batches_of.get(pid, []), run.inflight.get(pid))
        _in_flight(trace, wpid, run.inflight.get(pid), run.gone.get(pid, end))
        trace.instant(wpid, started, "worker start", {"pid": pid})
        if pid in run.gone:
            trace.instant(wpid, run.gone[pid], "worker exit", {"pid": pid})
    # Worker threads: a track each, with their batches and in-flight slot; no memory of their own to draw.
    for tid, (loader_id, worker_id, started) in sorted(_threads_of(view).items(), key=lambda kv: kv[1][:2] + (kv[0],)):
        prefix = "" if label == "main" else f"{label} / "
        name = prefix + thread_worker_track(loader_id, worker_id, tid)
        wpid = trace.process(node, tid, name)
        _worker_slices(trace, wpid, name, batches_of.get(tid, []), run.inflight.get(tid))
        _in_flight(trace, wpid, run.inflight.get(tid), end)
        trace.instant(wpid, started, "worker start", {"tid": tid, "pid": view.pid})


def _system(trace: _Trace, run: RunData, node: int, name: str) -> None:
    system = run.system
    tpid = trace.process(node, -1, name)
    rows = [(t, used) for t, used in zip(system.t, system.shm_used, strict=False) if used is not None]
    for t, used in trace.capped(f"{name} /dev/shm", rows):
        trace.events.append({"ph": "C", "name": "/dev/shm used (MiB)", "pid": tpid, "ts": trace.ts(t),
                             "args": {"used": _mib(used)}})  # fmt: skip
    rows = [(t, a) for t, a in zip(system.t, system.available, strict=False) if a is not None]
    for t, available in trace.capped(f"{name} available", rows):
        trace.events.append({"ph": "C", "name": "MemAvailable (MiB)", "pid": tpid, "ts": trace.ts(t),
                             "args": {"available": _mib(available)}})  # fmt: skip


def _finding_time(finding: FindingEntry, runs: list[RunData], end: float) -> tuple[float, int | None]:
    """When a finding happened and the process it is about: a hang at its record, a dead worker when it was gone,
    anything else at the end of the run (findings carry no time of their own)."""
    evidence = finding["evidence"]
    pids = evidence.get("pids")
    pid = pids[0] if pids else evidence.get("pid")
    if finding["code"].endswith("hang"):
        hangs = [float(h["t"]) for r in runs for h in r.hangs if h.get("t")]
        if hangs:
            return min(hangs), pid
    for run in runs:
        if pid is not None and pid in run.gone:
            return run.gone[pid], pid
    return end, pid


def _end_of(runs: list[RunData]) -> float:
    ends = [float(r.result["ended_at"]) for r in runs if r.result.get("ended_at")]
    ends += [r.system.t[-1] for r in runs if r.system.t]
    return max(ends, default=0.0)


def build_trace(runs: list[RunData], report: Report) -> dict[str, Any]:
    """The trace of one run, or of a job's run directories (one per node): a process per rank and per worker,
    the loop's waits and the workers' batches as slices, memory as counters, events and findings as instants."""
    starts = [float(r.meta["started_at"]) for r in runs if r.meta.get("started_at")]
    trace = _Trace(min(starts, default=0.0))
    job = split_job(runs)
    several, ranked = len(runs) > 1, is_job(runs)
    for view in job.ranks:
        _rank(trace, view, job.label(view) if ranked else "main")
    for node, run in enumerate(runs):
        _system(trace, run, node, f"node {node} system" if several else "system")
    end = _end_of(runs)
    first_main = trace.by_pid.get((job.ranks[0].node, job.ranks[0].pid)) if job.ranks else None
    for finding in report.get("findings") or []:
        t, pid = _finding_time(finding, runs, end)
        tpid = next((v for (_, p), v in trace.by_pid.items() if p == pid), first_main) if pid else first_main
        if tpid is not None:
            trace.instant(tpid, t, f"{finding.get('severity')}: {finding.get('code')}",
                          {"title": finding.get("title"), "fix": finding.get("fix")})  # fmt: skip
    trace.events.sort(key=lambda e: (e["pid"], e.get("tid", -1), e["ts"], -float(e.get("dur") or 0)))
    return {
        "traceEvents": trace.meta + trace.events,
        "displayTimeUnit": "ms",
        "otherData": {
            "dlprobe_version": __version__,
            "origin_unix_s": trace.origin,
            "run_dirs": [str(r.path) for r in runs],
            "track_cap": TRACK_CAP,
            "worker_batch_cap": f"each worker records {WORKER_BATCH_CAP} batches at each stride (1, 2, 4, ...)",
            "waits": "one slice per batch; its start is placed within the hooks' 0.25 s chunk",
            "downsampled": trace.downsampled,
        },
    }
