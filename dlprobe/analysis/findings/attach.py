"""Findings of `dlprobe attach` (a job watched from outside for a window): memory growth and when it reaches the
tightest limit, a loop that made no progress with each process's frame, workers that went, missing stacks, and
what only the in-process hooks can tell. They read `run.attach` (attach.json) and return nothing for other runs."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence, as_evidence
from dlprobe.analysis.findings.common import SHM_SPACE_FIX
from dlprobe.analysis.measures.memory_fit import workers_fit_memory
from dlprobe.analysis.measures.stack_causes import (
    classify,
    frame_text,
    innermost_user_frame,
    main_thread,
    main_wait_cause,
    user_frames,
)
from dlprobe.analysis.measures.worker_growth import kind_growth
from dlprobe.analysis.run.model import ProcessRecord, RunData
from dlprobe.units import MiB, format_bytes

GROWTH_MIN_BYTES = 8 * MiB  # a process's USS rise over the window worth projecting (start-up noise stays below)
GROWTH_MIN_SHARE = 0.02  # ... and at least this share of where it started
# A process "made no progress" when it used less CPU than this over the window (seconds, or share of the window).
IDLE_CPU_S = 0.05
IDLE_CPU_SHARE = 0.01
IDLE_RSS_MOVE = 4 * MiB  # a process whose RSS moved this much over the window is making progress, whatever its CPU
STUCK_MIN_WINDOW_S = 2.0
# A rate is extrapolated only from readings this far apart (or half the window, if shorter): a process's first
# second after it started (imports, the first batches) says nothing about the hours ahead.
MIN_SPAN_S = 2.0
# What the kernel's state alone (wait channel, syscall, blocked fd) can tell of a worker without a stack.
KERNEL_CAUSES = ("blocked-read", "lock-wait", "fork-lock")
SHM_PRESSURE_SHARE = 0.5
SAME_MOMENT_S = 0.1  # deaths this close together are one moment for the death watch (it polls every 20 ms)
KIND_NOTE = (
    "Copy-on-write: Private_Dirty rose while Anonymous stayed flat (a forked worker copying the parent's pages it "
    "writes to); new allocations: Anonymous rose."
)
# What attached-memory-growth says of the workers' memory, with the meaning input-bound and too-many-workers give them
WORKER_MEMORY_KEYS = ("projected_worker_bytes", "memory_for_workers_bytes", "workers_that_fit_memory")
HOOKS_ONLY = "batch wait times, the indices each worker is loading, dataset suspects and hang timing"


def format_eta(seconds: float) -> str:
    """'about 2 h 10 min', 'about 45 min', 'about 30 s'."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"about {minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours >= 48:
        return f"about {round(hours / 24)} days"
    return f"about {hours} h {rest} min" if rest else f"about {hours} h"


def _name(proc: dict[str, Any] | ProcessRecord) -> str:
    role: Any
    pid: Any
    wid: Any
    if isinstance(proc, ProcessRecord):
        role, pid, wid = proc.role, proc.pid, proc.worker_id
    else:
        role, pid, wid = proc.get("role"), proc.get("pid"), proc.get("worker_id")
    if role == "worker":
        return f"worker {wid} (pid {pid})" if wid is not None else f"worker pid {pid}"
    if role == "main":
        return f"the training process (pid {pid})"
    return f"pid {pid}"


def _attached(run: RunData) -> dict[str, Any] | None:
    return dict(run.attach) if run.meta.get("attached") and run.attach else None


def _mine(run: RunData, record: dict[str, Any]) -> list[dict[str, Any]]:
    """attach.json's entries for this run's processes (one rank's in a job view), with the role the model gave."""
    known = {p.pid: p for p in run.processes}
    out = []
    for entry in record.get("processes") or []:
        proc = known.get(int(entry.get("pid") or 0))
        if proc is None:
            continue
        role = proc.role if proc.role in ("main", "worker") else entry.get("role")
        out.append({**entry, "role": role, "worker_id": proc.worker_id})
    return out


def _rate(proc: ProcessRecord, until: float, metric: str = "uss") -> tuple[int, float, float] | None:
    """(growth, seconds, bytes per second) of the metric from its first to its last reading before `until`."""
    values = [(t, v) for t, v in proc.series.values(metric) if t < until]
    if len(values) < 2:
        return None
    (t0, v0), (t1, v1) = values[0], values[-1]
    if t1 - t0 <= 0:
        return None
    return v1 - v0, t1 - t0, (v1 - v0) / (t1 - t0)


def _kind_text(proc: ProcessRecord) -> tuple[str, dict[str, int] | None]:
    kinds = kind_growth(proc.series)
    if kinds is None:
        return "private memory (USS)", None
    if kinds["cow_bytes"] > kinds["anon_growth_bytes"]:
        return "copy-on-write", kinds
    if kinds["anon_growth_bytes"] > 0:
        return "new allocations", kinds
    return "file or /dev/shm pages", kinds


def _worker_memory(run: RunData) -> Evidence:
    """The worker memory figure and the memory the workers may use, as `run`'s advice and `tune` give them for the
    same evidence (measures/memory_fit.workers_fit_memory, loader_model/worker_memory.py): of the loader with the
    most workers; nothing where no worker's memory was read."""
    for loader in sorted(run.loaders, key=lambda lo: -len(run.workers(lo.loader_id))):
        _, evidence = workers_fit_memory(run, loader)
        if evidence:
            return as_evidence({k: v for k, v in evidence.items() if k in WORKER_MEMORY_KEYS})
    return {}


def _limit(run: RunData) -> tuple[str, int, int] | None:
    """(name, limit bytes, headroom bytes now) of the tightest limit: the cgroup's, else the machine's memory."""
    system = run.system
    usage = next((u for u in reversed(system.cgroup_usage) if u is not None), None)
    available = next((a for a in reversed(system.available) if a is not None), None)
    options = []
    if system.cgroup_limit and usage is not None:
        options.append(("the cgroup memory limit", system.cgroup_limit, system.cgroup_limit - usage))
    total = run.meta.get("machine", {}).get("mem_total")
    if available is not None and total:
        options.append(("the machine's memory", int(total), available))
    return min(options, key=lambda o: o[2]) if options else None


def find_attached_growth(run: RunData) -> list[Finding]:
    """Which processes grew over the window, by kind of page, and when the job reaches the tightest limit."""
    record = _attached(run)
    if record is None:
        return []
    window = float(record.get("t_end", 0.0)) - float(record.get("t_start", 0.0))
    # Once a worker has gone, the pages it shared with the others count as theirs alone: their USS rises with no
    # byte allocated or copied. Rates stop there.
    until = min((t for p in run.processes if p.role == "worker" and (t := run.gone.get(p.pid)) is not None),
                default=float("inf"))  # fmt: skip
    rows: list[dict[str, Any]] = []
    for proc in run.processes:
        if proc.role not in ("main", "worker"):
            continue
        rate = _rate(proc, until)
        if rate is None:
            continue
        grew, seconds, per_s = rate
        start = proc.series.values("uss")[0][1]
        end = [v for t, v in proc.series.values("uss") if t < until][-1]
        if grew < GROWTH_MIN_BYTES or grew < GROWTH_MIN_SHARE * start or seconds < min(MIN_SPAN_S, 0.5 * window):
            continue
        kind, kinds = _kind_text(proc)
        rows.append(
            {
                "name": _name(proc),
                "pid": proc.pid,
                "role": proc.role,
                "uss_start_bytes": start,
                "uss_end_bytes": end,
                "grew_bytes": grew,
                "seconds": round(seconds, 1),
                "bytes_per_s": round(per_s),
                "kind": kind.split(" (")[0],
                "copied_bytes": (kinds or {}).get("cow_bytes"),
                "new_anonymous_bytes": (kinds or {}).get("anon_growth_bytes"),
            }
        )
    if not rows:
        return []
    rows.sort(key=lambda r: -r["bytes_per_s"])
    total_rate = sum(r["bytes_per_s"] for r in rows)
    worst = rows[0]
    limit = _limit(run)
    evidence: Evidence = {"growing": rows, "bytes_per_s_total": total_rate, **_worker_memory(run)}
    per_min = format_bytes(worst["bytes_per_s"] * 60)
    title = f"{worst['name'][0].upper()}{worst['name'][1:]} grows {per_min}/min: {worst['kind']}"
    eta_text = ""
    severity = "warning"
    if limit is not None and total_rate > 0:
        name, limit_bytes, headroom = limit
        eta = max(0.0, headroom / total_rate)
        alone = max(0.0, headroom / worst["bytes_per_s"])
        evidence.update({"limit": name, "limit_bytes": limit_bytes, "headroom_bytes": headroom, "eta_s": round(eta)})
        title += f"; at this rate the job reaches {name} in {format_eta(eta)}"
        eta_text = (
            f" {format_bytes(headroom)} is still free under {name} ({format_bytes(limit_bytes)}); the {len(rows)} "
            f"growing process(es) add {format_bytes(total_rate * 60)}/min together, so at this rate the job reaches "
            f"it in {format_eta(eta)} ({worst['name']} alone would take {format_eta(alone)}). "
            "When it does, the kernel's OOM killer ends the largest process, typically a worker: "
            "'DataLoader worker (pid N) is killed by signal: Killed.'"
        )
        severity = "error" if eta < 3600 else "warning"
    lines = "; ".join(
        f"{r['name']} {format_bytes(r['uss_start_bytes'])} -> {format_bytes(r['uss_end_bytes'])} in {r['seconds']:g} s"
        f" ({r['kind']})"
        for r in rows[:6]
    )
    detail = f"Over the {worst['seconds']:g} s watched, private memory (USS) grew: {lines}." + eta_text
    if evidence.get("projected_worker_bytes") and evidence.get("memory_for_workers_bytes"):
        fit = evidence.get("workers_that_fit_memory")
        detail += (
            f" A worker holds up to {format_bytes(evidence['projected_worker_bytes'])} and the workers may use "
            f"{format_bytes(evidence['memory_for_workers_bytes'])}"
            + (f": {fit} such workers fit." if fit is not None else ".")
        )
    if any(r["kind"] != "new allocations" for r in rows):
        detail += " " + KIND_NOTE
    if any(r["kind"] == "copy-on-write" for r in rows):
        fix = (
            "Copy-on-write: the workers read Python objects the parent built (a list of dicts, strings), and every "
            "read writes a reference count, so the kernel copies the page. Keep the data in numpy arrays, one "
            "buffer plus offsets, or dlprobe.fixes.PackedRecords; call gc.freeze() before the loader starts."
        )
    else:
        fix = (
            "New allocations that are never freed: look for state that grows in __getitem__ or the training step "
            "(caches without a bound, appended lists, tensors kept with their graph) and bound or drop it."
        )
    fix += f" `{record.get('rerun')}` names the dataset attributes responsible (the in-process hooks)."
    return [Finding("attached-memory-growth", severity, title, detail, fix, evidence)]


UNKNOWN_FIX = (
    "Each process's stack is in attach.json of the run directory (`py-spy dump --pid PID` shows it live; add "
    "--native for C frames): look at what the frame above waits for (a lock, an event, another rank in a collective)."
)


def _cause_suffix(cause: str) -> str:
    return "" if cause == "unknown" else f": {cause}"


def _idle(entry: dict[str, Any], rss_range: dict[int, int]) -> bool:
    """Almost no CPU over the window, and memory that did not move: a worker filling a cache at 16 MiB/s spends
    under 0.05 s of CPU in 6 s (clock ticks are 10 ms), yet it is making progress."""
    cpu, seen = entry.get("cpu_s"), float(entry.get("seen_s") or 0.0)
    moved = rss_range.get(int(entry.get("pid") or 0), 0) >= IDLE_RSS_MOVE
    return cpu is not None and cpu <= max(IDLE_CPU_S, IDLE_CPU_SHARE * seen) and not moved


def _rss_range(run: RunData) -> dict[int, int]:
    """Each process's RSS range over the readings it was read alive in (a process gone before its first read is
    recorded with RSS 0): absent for one never read alive."""
    out = {}
    for proc in run.processes:
        values = [v for _, v in proc.series.values("rss") if v > 0]
        if values:
            out[proc.pid] = max(values) - min(values)
    return out


def _stack_lines(thread: dict[str, Any] | None) -> list[str]:
    return [frame_text(f) for f in user_frames(thread)][:8]


def find_attached_stuck(run: RunData) -> list[Finding]:
    """The training process and every worker used (almost) no CPU over the window: the loop is stuck. Names the
    worker that sits in the user's code, and each process's frame."""
    record = _attached(run)
    if record is None:
        return []
    procs = [p for p in _mine(run, record) if p.get("role") in ("main", "worker") and not p.get("gone")]
    mains = [p for p in procs if p["role"] == "main"]
    workers = [p for p in procs if p["role"] == "worker"]
    window = float(record.get("t_end", 0.0)) - float(record.get("t_start", 0.0))
    moved = _rss_range(run)
    if not mains or window < STUCK_MIN_WINDOW_S or not all(_idle(p, moved) for p in procs):
        return []
    findings = []
    for main in mains:
        mine = [w for w in workers if w.get("main_pid") in (main["pid"], None)]
        in_user = []
        for w in mine:
            thread = main_thread(w.get("stack") or [])
            frame = innermost_user_frame(thread)
            if frame is not None:
                in_user.append((w, thread, frame))
        # Without a stack (py-spy refused or missing) the kernel's state can still say a worker is blocked.
        by_kernel = [
            (w, c) for w in mine if not w.get("stack") and (c := classify(w, None, "fork")).cause in KERNEL_CAUSES
        ]
        main_where = innermost_user_frame(main_thread(main.get("stack") or []))
        frames = {
            _name(p): (frame_text(f) if (f := innermost_user_frame(main_thread(p.get("stack") or []))) else None)
            for p in [main, *mine]
        }
        evidence: Evidence = {
            "window_s": round(window, 1),
            "cpu_s": {_name(p): p.get("cpu_s") for p in [main, *mine]},
            "frames": frames if any(frames.values()) else None,
            "stack_problem": record.get("stack_problem"),
        }
        if in_user:
            w, thread, frame = in_user[0]
            cause = classify(w, None, "fork")
            where = frame_text(frame)
            title = (
                f"Stuck: {_name(w)} used no CPU for the {window:.0f} s watched, in your code at "
                f"{where.split('  `')[0]}" + _cause_suffix(cause.cause)
            )
            detail = (
                f"The training process (pid {main['pid']}) and its {len(mine)} worker(s) made no CPU progress over "
                f"the window, and {_name(w)} is inside the dataset's code: {cause.summary}. Its frames (innermost "
                f"first): {'; '.join(_stack_lines(thread))}."
                + (f" The training process waits at {frame_text(main_where).split('  `')[0]}." if main_where else "")
                + (f" {len(in_user) - 1} more worker(s) are in your code too." if len(in_user) > 1 else "")
            )
            evidence.update({"pid": w["pid"], "cause": cause.cause, "stuck_frame": where,
                             "user_frames": _stack_lines(thread)})  # fmt: skip
            evidence.update(as_evidence({k: v for k, v in cause.evidence.items() if v is not None}))
            fix = cause.fix
        elif by_kernel:
            w, cause = by_kernel[0]
            title = f"Stuck: {_name(w)} used no CPU for the {window:.0f} s watched: {cause.cause}"
            detail = (
                f"The training process (pid {main['pid']}) and its {len(mine)} worker(s) made no CPU progress over "
                f"the window, and the kernel says {_name(w)} is {cause.summary}; without its stack dlprobe cannot "
                "say which line of your code it is in."
            )
            evidence.update({"pid": w["pid"], "cause": cause.cause})
            evidence.update(as_evidence({k: v for k, v in cause.evidence.items() if v}))
            fix = cause.fix
        else:
            cause = main_wait_cause(main)
            where = frame_text(main_where) if main_where else "an unknown frame (no stack)"
            title = f"Stuck: the training process (pid {main['pid']}) used no CPU for the {window:.0f} s watched"
            title += f", at {where.split('  `')[0]}" + _cause_suffix(cause.cause)
            detail = (
                f"Neither the training process nor its {len(mine)} worker(s) used CPU over the window, and no worker "
                f"is in your code: the training process is {cause.summary}."
            )
            evidence.update(
                {
                    "pid": main["pid"],
                    "cause": cause.cause,
                    "stuck_frame": frame_text(main_where) if main_where else None,
                }
            )
            fix = cause.fix
        if cause.cause == "unknown":
            fix = UNKNOWN_FIX
        problem = record.get("stack_problem")
        if problem:
            detail += f" Stacks are missing ({problem.get('error') or problem.get('kind')}): {problem.get('advice')}"
        worker_found = bool(in_user or by_kernel)
        code, severity = ("attached-worker-stuck", "error") if worker_found else ("attached-loop-stuck", "error")
        world = main.get("world_size") or 1
        if not worker_found and world > 1:
            severity = "warning"  # a rank waiting in a collective for the rank that is stuck: its consequence
            detail += (
                f" In a job of {world} ranks this is usually a rank waiting in a collective (all_reduce, barrier) "
                "for another rank that is stuck: see that rank's attached-worker-stuck finding."
            )
        findings.append(Finding(code, severity, title, detail, fix, evidence))
    return findings


def find_attached_workers_gone(run: RunData) -> list[Finding]:
    """Workers that ended during the window: a new epoch's workers replacing them, the job ending (in which order),
    or workers gone while the training process went on."""
    record = _attached(run)
    if record is None:
        return []
    procs = _mine(run, record)
    gone = [p for p in procs if p.get("role") == "worker" and p.get("gone")]
    if not gone:
        return []
    t0 = float(record.get("t_start", 0.0))

    def when(p: dict[str, Any]) -> float:
        t = p.get("gone_t") or run.gone.get(int(p["pid"]))  # the death watch's time (20 ms), else the sampler's
        return float(t) - t0 if t is not None else float("inf")

    def after(p: dict[str, Any]) -> float | None:
        return round(when(p), 2) if when(p) != float("inf") else None

    oom = {int(k["pid"]) for k in run.kernel.get("kills") or [] if k.get("pid") is not None}

    def how(p: dict[str, Any]) -> str:
        code = p.get("exit")
        if int(p["pid"]) in oom:
            return " (killed by the kernel's OOM killer)"
        if code is None:
            return ""
        return f" (killed by signal {-code})" if code < 0 else f" (exit code {code})"

    gone.sort(key=when)
    # Processes that went within one poll of each other went in an order nobody saw; the one killed by a signal is
    # then the likelier first (torch stops the others once it notices).
    # Failing that, one the sampler never read (gone before the first tick read the others, which were still there).
    same_moment = [p for p in gone if when(p) - when(gone[0]) <= SAME_MOMENT_S]
    killed = [p for p in same_moment if (p.get("exit") or 0) < 0 or p["pid"] in oom]
    read = _rss_range(run)
    never_read = [p for p in same_moment if int(p["pid"]) not in read]
    first = killed[0] if killed else never_read[0] if 0 < len(never_read) < len(same_moment) else None
    if first is not None and first is not gone[0]:
        gone.remove(first)
        gone.insert(0, first)
    started_later = [p for p in procs if p.get("role") == "worker" and not p.get("gone") and p["first_seen"] > t0 + 0.5]
    names = ", ".join(f"{_name(p)} at {after(p)} s{how(p)}" for p in gone[:8])
    evidence: Evidence = {
        "gone": [
            {"pid": p["pid"], "after_s": after(p), "exit": p.get("exit"), "oom_killed": p["pid"] in oom} for p in gone
        ]  # fmt: skip
    }
    if oom:
        evidence["kernel_log_lines"] = [k.get("line") for k in run.kernel.get("kills") or []][
            :4
        ]  # kernel_log: one line
    mains_gone = [p for p in procs if p.get("role") == "main" and p.get("gone")]
    if mains_gone:
        main = mains_gone[0]
        evidence["main_gone_after_s"] = after(main)
        first_killed = gone[0]["pid"] in oom or (gone[0].get("exit") or 0) < 0
        return [
            Finding(
                "attached-workers-gone",
                "error" if first_killed else "info",
                f"The job ended while watched: {_name(gone[0])} went first{how(gone[0])}, {after(gone[0])} s into "
                f"the window; {_name(main)} at {after(main)} s",
                f"In order: {names}; {_name(main)} at {after(main)} s. At a normal end the training process shuts its "
                "workers down just before it exits. If the job was not done, a worker that went first was probably "
                "killed (the kernel's OOM killer, a signal) and torch then ended the training process with "
                "'DataLoader worker (pid N) is killed by signal' or '... exited unexpectedly' on its stderr.",
                "Check the job's own output and the kernel log (`dmesg -T | grep -i -E 'killed process|oom'`) for the "
                f"pids; `{record.get('rerun')}` records which sample each worker was loading when it died.",
                evidence,
            )
        ]
    if started_later:
        evidence["started"] = [p["pid"] for p in started_later]
        return [
            Finding(
                "attached-workers-gone",
                "info",
                f"{len(gone)} worker(s) ended and {len(started_later)} new one(s) started while watched: "
                "a new epoch's workers",
                f"{names} ended and new workers started: the loader starts its workers again at every epoch "
                "(persistent_workers=False).",
                "If the epochs are short, persistent_workers=True saves starting the workers (and copying the "
                "parent's memory into them) every epoch.",
                evidence,
            )
        ]
    return [
        Finding(
            "attached-workers-gone",
            "error" if any(p["pid"] in oom for p in gone) else "warning",
            f"{len(gone)} DataLoader worker(s) disappeared while watched: {names}",
            f"{names} ended while the training process kept running and no new worker started: either its loop "
            "over the DataLoader ended (the loader shuts its workers down), or they were killed (the kernel's OOM "
            "killer, a signal), and torch raises 'DataLoader worker (pid N) exited unexpectedly' in the training "
            "process at its next batch.",
            "Check the kernel log (`dmesg -T | grep -i -E 'killed process|oom'`) for the pids; run the job under "
            f"`{record.get('rerun')}` to get the sample a worker was loading when it died.",
            evidence,
        )
    ]


def find_attached_outside_view(run: RunData) -> list[Finding]:
    """What the window could and could not see: stacks missing and why, /dev/shm, and what needs the hooks."""
    record = _attached(run)
    if record is None:
        return []
    findings = []
    problem = record.get("stack_problem")
    if problem:
        why = {
            "permission": "the kernel refused py-spy ptrace access",
            "missing": "py-spy is not installed",
        }.get(str(problem.get("kind")), "py-spy failed")
        findings.append(
            Finding(
                "attached-no-stacks",
                "warning",
                f"No stacks: {why}" + (f" ({problem['error']})" if problem.get("error") else ""),
                "dlprobe attach reads each process's stack with `py-spy dump --nonblocking`, which needs ptrace "
                "access to the job's processes; without it the report cannot say which frame a stuck process is "
                "in. The memory readings come from /proc and are complete.",
                (problem.get("advice") or "")
                + f" Or start the job under `{record.get('rerun')}`, whose hooks record stacks from inside.",
                as_evidence(problem),
            )
        )
    shm_used = [u for u in run.system.shm_used if u is not None]
    shm_total = run.system.shm_total
    shm_text = ""
    evidence: Evidence = {"rerun": record.get("rerun"), "window_s": None}
    if shm_used and shm_total:
        shm_text = f" /dev/shm held {format_bytes(shm_used[-1])} of {format_bytes(shm_total)}."
        evidence.update({"shm_used_bytes": shm_used[-1], "shm_total_bytes": shm_total})
        if shm_used[-1] > SHM_PRESSURE_SHARE * shm_total:
            findings.append(
                Finding(
                    "attached-shm-full",
                    "warning",
                    f"/dev/shm is {shm_used[-1] / shm_total:.0%} full ({format_bytes(shm_used[-1])} of "
                    f"{format_bytes(shm_total)})",
                    "Workers hand every batch to the training process through /dev/shm; when it fills, a worker "
                    "dies with SIGBUS ('DataLoader worker is killed by signal: Bus error').",
                    SHM_SPACE_FIX + " Remove stale files left in /dev/shm by jobs that ended.",
                    {"shm_used_bytes": shm_used[-1], "shm_total_bytes": shm_total},
                )
            )
    window = float(record.get("t_end", 0.0)) - float(record.get("t_start", 0.0))
    evidence["window_s"] = round(window, 1)
    # The whole tree, not this rank's share: every rank of a job then says the same, and the job report says it once.
    procs = record.get("processes") or []
    mains = sum(1 for p in procs if p.get("role") == "main")
    workers = sum(1 for p in procs if p.get("role") == "worker")
    ended = " The job ended during the window." if record.get("job_ended") else ""
    cut = " Ctrl-C ended the window early." if record.get("interrupted") else ""
    findings.append(
        Finding(
            "attached-outside-view",
            "info",
            f"Attached from outside for {window:.0f} s: {mains} training process(es), {workers} worker(s); "
            f"{HOOKS_ONLY} need `{record.get('rerun')}`",
            "dlprobe attach read /proc (memory by kind of page, CPU time), /dev/shm, the cgroup and one "
            f"non-blocking py-spy stack per process; it installed nothing in the job.{shm_text}{ended}{cut} "
            f"Without the in-process hooks it cannot give {HOOKS_ONLY}, nor say which DataLoader a worker serves "
            "(workers are numbered by start order). Python 3.14's remote execution (sys.remote_exec) could install "
            "the hooks in a running job; dlprobe does not do that yet.",
            f"For the full diagnosis start the job under `{record.get('rerun')}`.",
            evidence,
        )
    )
    return findings
