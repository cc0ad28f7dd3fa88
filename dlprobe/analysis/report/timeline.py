"""The run's timeline for report.html: its series downsampled, every event kept, the hang and hotspot stacks, the
tail of stderr.log. Built from the loaded run (and, in a job, the report's ranks), bounded in size whatever the length
of the run and JSON-able, so the page (`render/html.py`) needs neither `RunData` nor the run directory."""

from __future__ import annotations

import shlex
from typing import Any, TypedDict

from dlprobe.analysis.measures.stats import job_pss_summable
from dlprobe.analysis.report.downsample import downsample, keep_indices
from dlprobe.analysis.report.schema import Report
from dlprobe.analysis.run.labels import legend_name, process_name
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import (
    EV_BATCHES,
    EV_EPOCH,
    EV_LOADER_ERROR,
    EV_SCAN_START,
    EV_SCRIPT_ERROR,
    EV_STOP,
    EV_TAKEOVER,
    EV_TRIAL_START,
    SAMPLER_OK,
)
from dlprobe.units import MiB

MAX_POINTS = 600  # per line: min/max per bucket keeps the peaks; ~600 points draw a 900 px wide chart faithfully
MAX_STACK_LINES = 12  # hotspot stacks shown per process
KIND_LINES = (("pss_anon", "solid", "anonymous"), ("pss_file", "dashed", "file"), ("pss_shmem", "dashdot", "shm"))


class CgroupLine(TypedDict):
    usage: list[list[float]]
    limit: int | None
    path: str | None


class ShmLine(TypedDict):
    used: list[list[float]]
    total: int | None


class OverLimit(TypedDict):
    """The readings of a series that passed a limit the kernel enforces (drawn at it), and the highest, in MiB."""

    readings: int
    highest: float | None


class Timeline(TypedDict):
    """What report.html draws besides the report: each list bounded (MAX_POINTS per line, MAX_STACK_LINES stacks per
    process); times in seconds since the run started, memory in MiB."""

    t_end: float | None
    reproduce: str
    cwd: str | None
    probe_started: bool | None
    processes: list[dict[str, Any]]  # name, role, and uss/rss/pss_* as [[s, MiB], ...]
    shm: ShmLine
    cgroup: CgroupLine
    job_pss: list[list[float]]  # at most the cgroup's limit
    job_pss_over_limit: OverLimit  # the sums above it, drawn at it
    waits: list[dict[str, Any]]  # per loader: loader, batches, points [[s, ms], ...]
    events: list[dict[str, Any]]  # t, what, severity (and pid, name for a process that ended)
    hangs: list[dict[str, Any]]
    hotspots: list[dict[str, Any]]
    hotspots_problem: str | None
    stderr_tail: str | None
    stderr_not_kept: str | None  # why there is no tail: the script's stderr was a terminal or a pipe


def rank_labels(report: Report | None) -> dict[int, str]:
    """In a job: each rank's and worker's pid -> "rank 1 L0 worker 0 (pid)", from the report's processes."""
    if not report or len(report.get("ranks", [])) < 2:
        return {}
    labels = {}
    for proc in report["processes"]:
        if proc.get("rank") and proc["role"] in ("main", "worker"):
            name = legend_name(proc["role"], proc["pid"], proc["loader_id"], proc["worker_id"])
            labels[proc["pid"]] = f"{proc.get('rank')} {name}"
    return labels


def _points(t: list[float], values: list[Any], t0: float, scale: float) -> list[list[float]]:
    """One series as [seconds, value/scale] pairs, downsampled first so only the kept points are converted."""
    if len(t) != len(values):  # a series cut short (or never read) pairs only the times it has values for
        n = min(len(t), len(values))
        t, values = t[:n], values[:n]
    if None in values:
        keep = [i for i, v in enumerate(values) if v is not None]
        t, values = [t[i] for i in keep], [values[i] for i in keep]
    return [[round(t[i] - t0, 3), round(values[i] / scale, 3)] for i in keep_indices(t, values, MAX_POINTS)]


def _batch_times(run: RunData, t0: float) -> list[dict[str, Any]]:
    """Each loader's wait per batch against time; batches arrive in groups, so times inside a group are spread."""
    out = []
    for lo in run.loaders:
        pts: list[tuple[float, float]] = []
        last: float | None = None
        for ev in run.events:
            if ev.get("loader") != lo.loader_id:
                continue
            if ev.get("ev") == EV_EPOCH:
                last = float(ev.get("t", 0.0))
            elif ev.get("ev") == EV_BATCHES:
                waits = [w for w in ev.get("waits") or [] if isinstance(w, (int, float))]
                end = float(ev.get("t", 0.0))
                start = last if last is not None and last < end else end
                for i, wait in enumerate(waits):
                    pts.append((start + (end - start) * (i + 1) / len(waits) - t0, wait * 1000.0))
                last = end
        if pts:
            out.append(
                {"loader": lo.loader_id, "batches": len(pts), "points": [list(p) for p in downsample(pts, MAX_POINTS)]}
            )
    return out


def _events(run: RunData, t0: float, labels: dict[int, str]) -> list[dict[str, Any]]:
    """Every event that explains the curves, in time order: epochs, worker starts and ends, hangs, OOM kills."""
    names = {p.pid: process_name(p.role, p.pid, p.loader_id, p.worker_id, p.comm) for p in run.processes}
    names.update(labels)
    killed = {int(k["pid"]) for k in (run.kernel.get("kills") or []) if isinstance(k.get("pid"), int)}
    out: list[dict[str, Any]] = []
    for ev in run.events:
        kind, t = ev.get("ev"), ev.get("t")
        if not isinstance(t, (int, float)):
            continue
        if kind == EV_EPOCH:
            out.append(
                {
                    "t": t - float(ev.get("iter_s") or 0.0),
                    "what": f"loader {ev.get('loader')} epoch {ev.get('epoch')} starts",
                }
            )
            for w in ev.get("workers") or []:
                out.append(
                    {
                        "t": t,
                        "what": f"loader {ev.get('loader')} worker {w.get('worker_id')} started (pid {w.get('pid')})",
                    }
                )
        elif kind == EV_SCRIPT_ERROR:
            out.append({"t": t, "what": f"script raised {ev.get('type')}: {ev.get('message')}", "severity": "error"})
        elif kind == EV_LOADER_ERROR:
            message = str(ev.get("cause") or ev.get("message") or "").strip().splitlines()[-1:]
            what = f"loader {ev.get('loader')} raised {ev.get('type') or '?'}" + (f": {message[0]}" if message else "")
            out.append({"t": t, "what": what[:300], "severity": "error"})
        elif kind == EV_STOP:
            out.append({"t": t, "what": f"stopped by dlprobe ({ev.get('reason')})", "severity": "warning"})
        elif kind in (EV_TAKEOVER, EV_SCAN_START):
            out.append({"t": t, "what": f"dlprobe took over the loader ({kind})", "severity": "warning"})
        elif kind == EV_TRIAL_START:
            out.append({"t": t, "what": f"tune trial: num_workers={ev.get('num_workers')}"})
    for pid, t in run.gone.items():
        if pid in names and pid != run.meta.get("target_pid"):
            if pid in killed:
                out.append({"t": t, "what": f"{names[pid]} OOM-killed by the kernel", "severity": "error", "pid": pid,
                            "name": names[pid]})  # fmt: skip
            else:
                out.append({"t": t, "what": f"{names[pid]} ended", "pid": pid, "name": names[pid]})
    for hang in run.hangs:
        if isinstance(hang.get("t"), (int, float)):
            out.append(
                {
                    "t": hang["t"],
                    "what": f"hang {hang.get('number')}: no batch for {hang.get('waited_s')} s",
                    "severity": "error",
                }
            )
    ended = run.result.get("ended_at")
    if isinstance(ended, (int, float)):
        code, sig = run.result.get("exit_code"), run.result.get("signal")
        out.append({"t": ended, "what": f"the script ended: exit code {code}" + (f" ({sig})" if sig else ""),
                    "severity": "info" if code == 0 else "error"})  # fmt: skip
    for e in out:
        e["t"] = round(float(e["t"]) - t0, 3)
        e.setdefault("severity", "info")
    return sorted(out, key=lambda e: e["t"])


def _frame_text(frame: dict[str, Any]) -> str:
    """One frame as `>> function (file:line)`; the marker points at the user's own code, where hangs usually are."""
    where = str(frame.get("file") or "?") + (f":{frame['line']}" if frame.get("line") else "")
    text = f"{frame.get('name')} ({where})"
    if frame.get("code"):
        text += f"  {frame['code']}"
    return (">> " if frame.get("user") else "   ") + text


def _hang_stacks(run: RunData) -> list[dict[str, Any]]:
    hangs = []
    for hang in run.hangs:
        procs = []
        for p in hang.get("processes") or []:
            threads = []
            for th in p.get("stack") or []:
                frames = [_frame_text(f) for f in th.get("frames") or [] if isinstance(f, dict)]
                threads.append({"name": th.get("name"), "frames": frames})
            procs.append({"pid": p.get("pid"), "role": p.get("role"), "worker_id": p.get("worker_id"),
                          "state": p.get("state"), "threads": threads, "error": p.get("stack_error")})  # fmt: skip
        loop = hang.get("loop") or {}
        hangs.append({"number": hang.get("number"), "waited_s": hang.get("waited_s"), "processes": procs,
                      "problem": hang.get("stack_problem"), "awaited_worker": loop.get("awaited_worker")})  # fmt: skip
    return hangs


def _hotspots(run: RunData) -> list[dict[str, Any]]:
    if run.stacks is None or not run.stacks.stacks:
        return []
    names = {p.pid: process_name(p.role, p.pid, p.loader_id, p.worker_id, p.comm) for p in run.processes}
    by_pid: dict[int, list[Any]] = {}
    for s in run.stacks.stacks:
        by_pid.setdefault(s.pid, []).append(s)
    out = []
    for pid, stacks in by_pid.items():
        total = sum(s.count for s in stacks)
        top = sorted(stacks, key=lambda s: -s.count)[:MAX_STACK_LINES]
        out.append({"pid": pid, "name": names.get(pid, f"pid {pid}"), "samples": total,
                    "stacks": [{"count": s.count, "frames": s.frames[-8:]} for s in top]})  # fmt: skip
    return sorted(out, key=lambda h: -h["samples"])


def _sampler_problem(run: RunData) -> str | None:
    """Why the run has no hotspots, when its stack sampler said so (stacks.json)."""
    profile = run.stacks
    if profile is None or profile.status in (None, SAMPLER_OK) or profile.stacks:
        return None
    return (
        f"worker hotspots: the stack sampler recorded nothing ({profile.status}: {profile.error or 'no reason given'})"
    )


def _reproduce(meta: dict[str, Any]) -> str:
    argv = [str(a) for a in meta.get("argv") or []]
    launch = meta.get("launch") or "script"
    if launch == "command" and meta.get("command"):
        return "dlprobe run -- " + shlex.join(str(c) for c in meta["command"])
    if launch == "module":
        return "dlprobe run -m " + shlex.join([str(meta.get("script") or "?"), *argv])
    return "dlprobe run " + shlex.join([str(meta.get("script") or "?"), *argv])


def timeline_from_run(run: RunData, report: Report | None = None) -> Timeline:
    """What the charts and stack sections need, bounded in size whatever the length of the run. With a job's
    report, the ranks and their workers are drawn, named by rank (the launcher is not a rank)."""
    labels = rank_labels(report)
    # In a job the whole run's roles are the launcher's view (torchrun is "main"); the report knows each rank's.
    reported = report["processes"] if report and labels else []
    roles = {p["pid"]: p["role"] for p in reported}
    t0 = float(run.meta.get("started_at") or (run.system.t[0] if run.system.t else 0.0))
    order = {"main": 0, "worker": 1}
    procs = sorted(run.processes, key=lambda p: (order.get(p.role, 2), p.loader_id or 0, p.worker_id or 0, p.pid))
    processes = []
    for p in procs:
        if (p.pid not in labels) if labels else p.role not in ("main", "worker"):
            continue
        name = labels.get(p.pid) or process_name(p.role, p.pid, p.loader_id, p.worker_id, p.comm)
        entry: dict[str, Any] = {"name": name, "role": roles.get(p.pid, p.role)}
        for metric in ("uss", "rss", *(k for k, _, _ in KIND_LINES)):
            points = _points(p.series.t, getattr(p.series, metric), t0, MiB)
            if points:
                entry[metric] = points
        processes.append(entry)

    ended = run.result.get("ended_at")
    limit = run.system.cgroup_limit
    job_t, job_pss = job_pss_summable(run.processes)
    over = [v for v in job_pss if limit and v > limit]
    return {
        "t_end": round(float(ended) - t0, 3) if isinstance(ended, (int, float)) and t0 else None,
        "reproduce": _reproduce(dict(run.meta)),
        "cwd": run.meta.get("cwd"),
        "probe_started": run.probe_started,
        "processes": processes,
        "shm": {"used": _points(run.system.t, run.system.shm_used, t0, MiB), "total": run.system.shm_total},
        "cgroup": {
            "usage": _points(run.system.t, run.system.cgroup_usage, t0, MiB),
            "limit": run.system.cgroup_limit,
            # the cgroup whose use the sampler reads: the one setting the tightest limit, else the script's own
            "path": run.meta.get("cgroup_limit_dir") or run.meta.get("cgroup"),
        },
        "job_pss": _points(job_t, [min(v, limit) if limit else v for v in job_pss], t0, MiB),
        "job_pss_over_limit": {"readings": len(over), "highest": round(max(over) / MiB, 3) if over else None},
        "waits": _batch_times(run, t0),
        "events": _events(run, t0, labels),
        "hangs": _hang_stacks(run),
        "hotspots": _hotspots(run),
        "hotspots_problem": _sampler_problem(run),
        "stderr_tail": run.stderr_tail,
        "stderr_not_kept": run.stderr_not_kept,
    }


def page_timeline(run: RunData | None, report: Report | None = None) -> tuple[Timeline | None, list[str]]:
    """The timeline for the page, or None and why: a timeline that cannot be built is named on the page rather than
    losing the page (the report's own sections still make a useful one)."""
    if run is None:
        return None, []
    try:
        return timeline_from_run(run, report), []
    except Exception as exc:  # the page says what is missing
        return None, [f"the timeline: {type(exc).__name__}: {exc}"]
