"""The report: one JSON-ready model built from a run and its findings; every output renders from it. Its shape is
analysis/report/schema.py (TypedDicts, and the JSON Schema shipped as report.schema.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from dlprobe import __version__
from dlprobe.analysis import analysis_failed, analyze, failure_where
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.start_method import readiness_line
from dlprobe.analysis.job.findings import analyze_job
from dlprobe.analysis.job.model import Job, NodeMemory, RankView, is_job, split_job
from dlprobe.analysis.measures.stats import job_pss_peak, metric_summary, tree_total, wait_summary
from dlprobe.analysis.measures.worker_cpu import idle_worker_ids, loader_cpu
from dlprobe.analysis.measures.worker_growth import worker_projection
from dlprobe.analysis.measures.worker_steps import job_steady_peak, worker_steps
from dlprobe.analysis.report.schema import (
    SCHEMA_VERSION,
    AttachedEntry,
    FindingEntry,
    LoaderEntry,
    NodeEntry,
    ProcessEntry,
    RankEntry,
    ReadProblem,
    Report,
    UssStep,
    WorkerGrowth,
    WorkerTime,
)
from dlprobe.analysis.report.verdict import judge
from dlprobe.analysis.run.model import PAGE_KINDS, RunData, SystemSeries, load_run
from dlprobe.rundir.schema import EV_BATCHES, ORPHAN_GRACE_S, ShmRemoved, SupervisorCost
from dlprobe.units import format_bytes


def finding_entry(finding: Finding) -> FindingEntry:
    """A finding as report.json holds it; its evidence is the code's (analysis/evidence/schema.py)."""
    return cast(FindingEntry, finding.to_dict())


def _loader_entry(run: RunData, lo: Any) -> LoaderEntry:
    cfg = lo.config
    ds = lo.dataset
    entry: dict[str, Any] = {
        "loader_id": lo.loader_id,
        "dataset_type": ds.get("type"),
        "dataset_len": ds.get("len"),
        "iterable": ds.get("iterable"),
        "batch_size": cfg.get("batch_size"),
        "num_workers": lo.num_workers_setting,  # None: the settings could not be read (a probe-degraded finding)
        "start_method": lo.start_method,
        "pin_memory": cfg.get("pin_memory"),
        "prefetch_factor": cfg.get("prefetch_factor"),
        "persistent_workers": cfg.get("persistent_workers"),
        "timeout": cfg.get("timeout"),
        "batch_bytes": (lo.batch_info or {}).get("bytes"),
        "batch_leaves": (lo.batch_info or {}).get("leaves"),
        "dataset_est_bytes": ds.get("est_bytes"),
        "suspects": ds.get("suspects") or [],
        "workers": [
            {"worker_id": p.worker_id, "pid": p.pid}
            for p in sorted(run.workers(lo.loader_id), key=lambda p: (p.worker_id or 0, p.pid))
        ],
        # Workers that are threads of the training process (worker_method="thread"): by native thread id.
        "worker_method": "thread" if lo.thread_workers else cfg.get("worker_method"),
        "worker_threads": sorted(
            ({"worker_id": wid, "tid": tid} for e in lo.epochs for tid, wid in e.worker_tids.items()),
            key=lambda t: (t["worker_id"], t["tid"]),
        ),
        "errors": lo.errors,
        # Batches each worker delivered, per epoch (None: not recorded), and the workers' time while the loop ran:
        # on a CPU, queued for one, asleep (None: CPU time not read).
        "worker_batches": [e.worker_batches for e in lo.epochs],
        "worker_time": _worker_time(run, lo),
        **wait_summary(lo),
    }
    line = _readiness_line(run, lo)
    if line is not None:
        entry["start_readiness"] = line
    return cast(LoaderEntry, entry)  # the settings are read from the loader's events as they were recorded


def _readiness_line(run: RunData, lo: Any) -> str | None:
    """The loader's one line on start methods; a failure to build it loses the line, never the report (the
    start-method analyzer, run apart, says what failed)."""
    try:
        return readiness_line(run, lo)
    except Exception:
        return None


def _worker_time(run: RunData, lo: Any) -> WorkerTime | None:
    measured = loader_cpu(run, lo, idle_worker_ids(lo))
    if measured is None:
        return None
    runq = measured.runq_share
    return {"cpu_share": round(measured.cpu_share, 3), "runq_share": None if runq is None else round(runq, 3),
            "wait_share": round(measured.wait_share, 3), "wall_s": round(measured.wall_s, 2)}  # fmt: skip


def _batch_at(run: RunData, loader_id: int | None, t: float) -> int | None:
    """The loader's batches so far in its epoch at time t, from its `batches` events (None: none reported by then)."""
    marks = [(float(e["t"]), int(e["total"])) for e in run.events
             if e.get("ev") == EV_BATCHES and e.get("loader") == loader_id and isinstance(e.get("total"), int)
             and isinstance(e.get("t"), (int, float)) and float(e["t"]) <= t]  # fmt: skip
    return max(marks)[1] if marks else None


def _worker_growth(run: RunData, proc: Any) -> WorkerGrowth | None:
    """A worker's USS growth with its one-time steps apart (loader_model.worker_memory.find_steps, after its first
    batch), per batch the loader delivered, and `run`'s projection of its growth to the epoch's end (cow-growth's
    worker_growth.worker_projection): what `dlprobe check` compares with a baseline. None: USS never read."""
    found = worker_steps(run, proc)
    if found is None:
        return None
    readings, start, steps = found.readings, found.start, found.steps
    first, peak = readings[0][1], max(v for _, v in readings)
    stepped = sum(s.bytes for s in steps)
    # a step read before the steady part (a copy at a full collection during the first batch) is in what the worker
    # held at the start, so not in its growth; it is apart from its peak all the same
    steady = max(0, peak - start - found.stepped_in_steady_part())
    batches = _batch_at(run, proc.loader_id, readings[-1][0])
    loader = run.loader(proc.loader_id)
    try:
        projected: int | None = worker_projection(run, loader, proc).projected_bytes if loader else None
    except Exception:  # the projection is cow-growth's to report on; the check still has the measured growth
        projected = None
    step_entries: list[UssStep] = [
        {"t": round(s.t - float(run.meta.get("started_at") or 0.0), 3), "batch": _batch_at(run, proc.loader_id, s.t),
         "bytes": s.bytes}
        for s in steps
    ]  # fmt: skip
    for entry, step in zip(step_entries, steps, strict=True):
        if step.cause:
            entry["cause"] = step.cause
        if step.held:
            entry["held_at_start"] = True
    growth: WorkerGrowth = {
        "growth_bytes": peak - first,
        "held_at_start_bytes": max(0, start - first),
        "steady_bytes": steady,
        "steady_peak_bytes": max(first, peak - stepped),
        "steps": step_entries,
        "batches": batches,
        "steady_per_batch_bytes": round(steady / batches) if batches else None,
        "projected_epoch_end_bytes": projected,
    }
    # began before the first reading: that reading holds some or all of the copy, which no rise shows whole
    unseen = [c for c in proc.full_collections if c[0] < readings[0][0]]
    if unseen:
        growth["collected_before_first_reading"] = len(unseen)
    return growth


def _process_entry(proc: Any, run: RunData | None = None) -> ProcessEntry:
    entry: dict[str, Any] = {
        "pid": proc.pid,
        "role": proc.role,
        "loader_id": proc.loader_id,
        "worker_id": proc.worker_id,
        "comm": proc.comm,
        "samples": len(proc.series.t),
    }
    if proc.memory_unread is not None:
        entry["memory_unread"] = proc.memory_unread
    if proc.teardown_from is not None:
        started = float((run.meta.get("started_at") if run is not None else None) or 0.0)
        entry["teardown_from_s"] = round(proc.teardown_from - started, 2)
        entry["teardown_readings"] = proc.teardown_readings
    for metric in ("rss", "uss", "pss", "swap", *PAGE_KINDS):
        entry[metric] = metric_summary(proc.series, metric)
    if run is not None and proc.role == "worker":
        try:
            entry["growth"] = _worker_growth(run, proc)
        except Exception:  # a damaged run's readings: the check compares what it has (peak less start), never less
            entry["growth"] = None
    return cast(ProcessEntry, entry)  # the metrics' keys are set in the loop above


def _steady_peak(run: RunData) -> int | None:
    try:
        return job_steady_peak(run)
    except Exception:  # a damaged run's readings: the check falls back to the peak less every step
        return None


def build_report(run: RunData, findings: list[Finding]) -> Report:
    meta, result, system = run.meta, run.result, run.system
    ended = result.get("ended_at")
    shm_used = [u for u in system.shm_used if u is not None]
    available = [a for a in system.available if a is not None]
    cg_usage = [u for u in system.cgroup_usage if u is not None]
    ordered, verdict = judge(findings)
    return {
        "schema_version": SCHEMA_VERSION,
        "dlprobe_version": meta.get("dlprobe_version", __version__),
        "run_dir": str(run.path),
        "script": meta.get("script"),
        "argv": meta.get("argv", []),
        "exit_code": result.get("exit_code"),
        "signal": result.get("signal"),
        "duration_s": round(ended - meta["started_at"], 3) if ended and meta.get("started_at") else None,
        "machine": meta.get("machine", {}),
        "loaders": [_loader_entry(run, lo) for lo in run.loaders],
        "processes": [_process_entry(p, run) for p in sorted(run.processes, key=_process_order)],
        "system": {
            "shm_total": system.shm_total,
            "shm_peak": max(shm_used) if shm_used else None,
            "available_min": min(available) if available else None,
            "cgroup_limit": system.cgroup_limit,
            "cgroup_peak": max(cg_usage) if cg_usage else None,
            "pss_total_peak": job_pss_peak(run.processes),
            "shm_job_peak": _shm_job_peak(run),
            "pss_anon_total_peak": job_pss_peak(run.processes, "pss_anon"),
            "pss_anon_total_steady_peak": _steady_peak(run),
        },
        "findings": [finding_entry(f) for f in ordered],
        "verdict": verdict,
        "probe_cost": result.get("supervisor"),
        "shm_removed": result.get("shm_removed") or [],
        "orphans_stopped": result.get("orphans_stopped") or [],  # where dlprobe ended the run itself
        "orphans_left": result.get("orphans_left") or [],
        # what of the run directory could not be read (also a finding)
        "read_problems": cast(list[ReadProblem], run.read_problems),
        # `dlprobe attach`: the run is a window on a job dlprobe did not start (no exit code, no hooks)
        "attached": _attached_entry(run),
    }


def _shm_job_peak(run: RunData) -> int | None:
    """The /dev/shm pages the job's own processes map at the most (their Pss_Shmem summed, each counted with its last
    reading): a job beside it does not count, as it does in the machine's /dev/shm use (system.shm_peak)."""
    return max(tree_total(run.processes, "pss_shmem")[1], default=None)


def _attached_entry(run: RunData) -> AttachedEntry | None:
    if not run.meta.get("attached"):
        return None
    record = run.attach or {}
    return {
        "pid": run.meta.get("attached_pid"),
        "root_pid": run.meta.get("target_pid"),
        "job_ended": record.get("job_ended"),
        "interrupted": record.get("interrupted"),
    }


def cleanup_lines(report: Report) -> list[str]:
    """What dlprobe cleaned up after the job: workers that outlived it, files its killed processes left in /dev/shm."""
    lines = []
    left = report.get("orphans_left") or []
    if left:
        lines.append(
            f"{len(left)} DataLoader worker(s) still ran {ORPHAN_GRACE_S:.0f} s after their main process was gone, "
            "left running as python leaves them (a worker blocked in __getitem__ never checks on its parent): "
            f"pids {', '.join(map(str, left[:8]))}{', ...' if len(left) > 8 else ''}; `kill` them if they are stuck"
        )
    orphans = report.get("orphans_stopped") or []
    if orphans:
        lines.append(
            f"dlprobe stopped {len(orphans)} DataLoader worker(s) still running {ORPHAN_GRACE_S:.0f} s after their "
            f"main process was gone (pids {', '.join(map(str, orphans[:8]))}{', ...' if len(orphans) > 8 else ''})"
        )
    removed = report.get("shm_removed") or []
    if removed:
        total = sum(int(r.get("bytes") or 0) for r in removed)
        names = ", ".join(str(r.get("name")) for r in removed[:3]) + (", ..." if len(removed) > 3 else "")
        lines.append(
            f"dlprobe removed {len(removed)} file(s) ({format_bytes(total)}) that the job's killed processes left "
            f"in /dev/shm: {names}"
        )
    return lines


def probe_cost_line(report: Report) -> str | None:
    """One sentence on what the supervisor cost (result.json "supervisor"), or None for runs that did not record it.

    Not a finding: the CPU cap binds on any busy machine while workers' memory moves, and there is nothing to fix.
    """
    cost = report.get("probe_cost")
    if not cost or cost.get("cpu_share") is None:
        return None
    line = f"dlprobe's own cost: {100 * float(cost['cpu_share']):.1f}% of one core"
    wall = float(cost.get("wall_s") or 0.0)
    if wall >= 0.05:  # a shorter (or unrecorded) run has no duration worth naming: never "over 0 s"
        line += f" over {wall:.0f} s" if wall >= 1 else f" over {wall:.1f} s"
    if cost.get("cpu_budget"):
        window = cost.get("cpu_window_s")
        line += f" (cap {float(cost['cpu_budget']):.0%}" + (f" of any {float(window):.0f} s)" if window else ")")
        if window and float(cost.get("wall_s") or window) < float(window):
            line += ", most of it starting up"  # a run shorter than the cap's window: start-up is the share
    skipped = int(cost.get("deep_reads_skipped") or 0)
    if skipped:
        over = float(cost.get("over_budget_s") or 0.0)
        line += f"; {skipped} memory reading{'s' if skipped != 1 else ''} of moving processes deferred"
        line += f" over {over:.0f} s" if over >= 1 else ""
        line += " (every process still read at least every 5 s)"
    return line


def _process_order(proc: Any) -> tuple[int, int, int, int]:
    rank = {"main": 0, "worker": 1}.get(proc.role, 2)
    return (rank, proc.loader_id or 0, proc.worker_id or 0, proc.pid)


def report_for(path: Path) -> tuple[RunData, Report]:
    """Load a run directory, analyze it and build its report (a job report when several processes were probed).

    If the job's split or its report raises, the run is reported as one process, with a probe-degraded finding
    naming the failure: every run ends with a report."""
    try:
        run = load_run(path)
    except Exception as exc:  # a reader's bug: the report still says what happened, and `dlprobe run` its exit code
        problem = f"load_run raised {type(exc).__name__}: {str(exc)[:200]} (at {failure_where(exc)})"
        run = RunData(path, {}, {}, [], [], SystemSeries(), [], read_problems=[{"file": str(path), "problem": problem}])
    try:
        if is_job([run]):
            job = split_job([run])
            return run, build_job_report(job, analyze_job(job))
    except Exception as exc:  # the job view is a bug of dlprobe's: the single-process report still holds
        failed = analysis_failed("report_for (job)", exc, ["the job's per-rank view"], "job report step")
        return run, build_report(run, [*analyze(run), failed])
    return run, build_report(run, analyze(run))


def job_report_for(paths: list[Path]) -> tuple[Job, Report]:
    """Several run directories (one per node of a job) merged into one job report."""
    job = split_job([load_run(path) for path in paths])
    return job, build_job_report(job, analyze_job(job))


def _rank_entry(job: Job, view: RankView) -> RankEntry:
    run = view.run
    loaders = [wait_summary(lo) for lo in run.loaders]
    waits = [lo["wait_fraction"] for lo in loaders if lo["wait_fraction"] is not None and lo["batches"]]
    main = next((p for p in run.processes if p.role == "main"), None)
    workers = run.workers()
    ident = view.identity
    return {
        "label": job.label(view),
        "pid": view.pid,
        "rank": ident.get("rank"),
        "local_rank": ident.get("local_rank"),
        "world_size": ident.get("world_size"),
        "node_rank": view.node_rank,
        "host": ident.get("host"),
        "run_dir": str(run.path),
        "loaders": len(run.loaders),
        "workers": len(workers),
        "num_workers": max((lo.num_workers for lo in run.loaders), default=0),
        "batches": sum(lo["batches"] for lo in loaders),
        "wait_fraction": max(waits) if waits else None,
        "uss_peak": metric_summary(main.series, "uss")["peak"] if main else None,
        "workers_uss_peak": sum(metric_summary(p.series, "uss")["peak"] or 0 for p in workers) if workers else None,
        "pss_peak": job_pss_peak(run.processes),
    }


def _node_entry(job: Job, memory: NodeMemory) -> NodeEntry:
    run = job.runs[memory.node]
    return {
        "node": memory.node,
        "node_rank": memory.node_rank,
        "host": memory.host,
        "run_dir": str(run.path),
        "exit_code": run.result.get("exit_code"),
        "ranks": [job.label(v) for v in job.ranks if v.node == memory.node],
        "worker_processes": memory.workers,
        "pss_peak": memory.pss_peak,
        "pss_end": memory.pss[-1] if memory.pss else None,
        "uss_peak": max(memory.uss) if memory.uss else None,
        "memory_limit": memory.limit_bytes,
        "memory_limit_kind": memory.limit_kind,
        "pss_projected_epoch_end": memory.projected_bytes,
        "worker_projected_peak": memory.worker_peak_bytes,
        "workers_per_rank_fit": memory.workers_per_rank_fit,
        "pss_total": {"t": [round(t, 3) for t in memory.t], "bytes": memory.pss},
    }


def build_job_report(job: Job, findings: list[Finding]) -> Report:
    """The report of a job: the first run's header, loaders and processes labelled by rank, and "ranks"/"job"."""
    first = job.runs[0]
    report = build_report(first, findings)
    codes = [r.result.get("exit_code") for r in job.runs]
    report["exit_code"] = next((c for c in codes if c), codes[0])
    report["loaders"] = [
        {**_loader_entry(v.run, lo), "rank": job.label(v), "pid": v.pid} for v in job.ranks for lo in v.run.loaders
    ]
    seen: set[tuple[int, int]] = set()
    processes: list[ProcessEntry] = []
    for view in job.ranks:
        for proc in sorted(view.run.processes, key=_process_order):
            seen.add((view.node, proc.pid))
            processes.append({**_process_entry(proc, view.run), "rank": job.label(view)})
    for node, run in enumerate(job.runs):  # the launcher and anything else of the tree
        for proc in sorted(run.processes, key=_process_order):
            if (node, proc.pid) not in seen and proc.series.t:
                entry = _process_entry(proc, run)
                processes.append({**entry, "role": "other", "rank": None})
    report["processes"] = processes
    report["system"]["pss_total_peak"] = max((n.pss_peak or 0 for n in job.nodes), default=None)
    removed = [entry for r in job.runs for entry in r.result.get("shm_removed") or []]
    report["shm_removed"] = [cast(ShmRemoved, dict(entry)) for entry in removed]
    report["orphans_stopped"] = [pid for r in job.runs for pid in r.result.get("orphans_stopped") or []]
    report["orphans_left"] = [pid for r in job.runs for pid in r.result.get("orphans_left") or []]
    costs: list[dict[str, Any]] = [dict(r.result["supervisor"]) for r in job.runs if r.result.get("supervisor")]
    if len(costs) > 1:  # one supervisor per node: the costliest one, and every reading deferred anywhere
        costliest: dict[str, Any] = max(costs, key=lambda c: float(c.get("cpu_share") or 0.0))
        merged = {
            **costliest,
            "deep_reads_skipped": sum(int(c.get("deep_reads_skipped") or 0) for c in costs),
            "over_budget_s": max(float(c.get("over_budget_s") or 0.0) for c in costs),
        }
        report["probe_cost"] = cast(SupervisorCost, merged)  # the nodes' SupervisorCost records, merged
    report["ranks"] = [_rank_entry(job, v) for v in job.ranks]
    report["job"] = {
        "rank_count": len(job.ranks),
        "run_dirs": [str(r.path) for r in job.runs],
        "nodes": [_node_entry(job, n) for n in job.nodes],
    }
    return report
