"""Findings about the probe itself: what it could not record in this run, and why."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import as_evidence
from dlprobe.analysis.run.model import ProcessRecord, RunData
from dlprobe.rundir.schema import EV_PROBE_ERROR, LOG_TO_WHERE, SAMPLER_FAILED, SAMPLER_MISSING
from dlprobe.system.pyspy import PERMISSION_ADVICE, PERMISSION_ERROR, PY_SPY_ENV

MISSING_FIX = f"Install py-spy (`pip install py-spy`) or point {PY_SPY_ENV} at it, then run again."
OTHER_FIX = (
    "Run `py-spy record --pid PID` on a running training process to see the failure; check that this py-spy "
    f"supports this Python version, or point {PY_SPY_ENV} at one that does."
)


def _failures(run: RunData) -> dict[str, dict[str, Any]]:
    """One entry per probe part that failed: the latest event per process, counts summed over processes."""
    latest: dict[tuple[str, Any], dict[str, Any]] = {}
    for ev in run.events:
        if ev.get("ev") == EV_PROBE_ERROR:
            latest[(str(ev.get("where")), ev.get("pid"))] = ev
    by_where: dict[str, dict[str, Any]] = {}
    for (where, pid), ev in latest.items():
        entry = by_where.setdefault(
            where,
            {
                "where": where,
                "type": ev.get("type"),
                "message": ev.get("message"),
                "consequence": ev.get("consequence"),
                "count": 0,
                "pids": [],
            },
        )
        entry["count"] += int(ev.get("count") or 1)
        entry["pids"].append(pid)
    return by_where


def find_probe_degraded(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    if not run.probe_started:
        findings.append(
            Finding(
                code="probe-degraded",
                severity="info",
                title="The in-process probe recorded nothing: its event log could not be written",
                detail="The training process wrote no events to the run directory (not even its start), so "
                "nothing about its DataLoaders is known: the events file could not be opened or written "
                "(read-only or full file system, quota, or a run directory the target cannot reach), or the "
                "probe failed before the script started. Memory samples taken from outside are still valid.",
                fix="Give the run directory a writable file system with free space (--out), then run again.",
                evidence={"events": len(run.events)},
            )
        )
    if run.read_problems:
        findings.append(_unreadable(run.read_problems))
    sampler = _sampler_failure(run)
    if sampler is not None:
        findings.append(sampler)
    unread = _memory_unread(run)
    if unread is not None:
        findings.append(unread)
    # The training process's own failures (probe_error events), then the supervisor's (result.json "problems").
    entries = [
        *_failures(run).values(),
        *({**p, "pids": [], "process": "supervisor"} for p in run.result.get("problems") or []),
    ]
    for entry in entries:
        if str(entry["where"]).startswith(LOG_TO_WHERE) and entry["type"] == SINK_UNUSED:
            findings.append(_sink_unused(entry))
            continue
        times = f" ({entry['count']} times)" if entry["count"] > 1 else ""
        findings.append(
            Finding(
                code="probe-degraded",
                severity="info",
                title=f"The probe could not record everything: {entry['where']} failed with {entry['type']}"[:200],
                detail=f"{entry['where']} failed{times}: {entry['type']}: {entry['message']}; "
                f"so {entry['consequence']}. The training itself was not affected.",
                fix="Usually the run directory's file system (full, read-only) or an unusual DataLoader subclass; "
                "report it to dlprobe with this message if neither applies.",
                evidence=as_evidence(entry),
            )
        )
    return findings


# The type of the probe_error a `--log-to` sink records when it logged nothing (in_training/sinks.py)
SINK_UNUSED = "SinkUnused"


def _sink_unused(entry: dict[str, Any]) -> Finding:
    """`--log-to wandb` (or mlflow) logged nothing, for what the script did (no run, the library not imported)."""
    return Finding(
        code="probe-degraded",
        severity="info",
        title=f"{entry['where']}: {entry['message']}"[:200],
        detail=f"{entry['where']}: {entry['message']}. dlprobe logs into the script's own active run only, and "
        "never starts one or imports the library itself; the rest of this report does not depend on it.",
        fix="Start the run (wandb.init, mlflow.start_run) before the training loop, in the process and thread that "
        "iterate the DataLoader; or leave out --log-to.",
        evidence=as_evidence(entry),
    )


def _sampler_failure(run: RunData) -> Finding | None:
    """The hotspot sampler was due to run (the loop starved for data) but py-spy recorded nothing."""
    stacks = run.stacks
    if stacks is None or stacks.status not in (SAMPLER_FAILED, SAMPLER_MISSING):
        return None  # never started, worked, or turned off on purpose
    error = stacks.error or "no message"
    if stacks.status == SAMPLER_MISSING:
        fix = MISSING_FIX
    elif PERMISSION_ERROR.search(error):
        fix = PERMISSION_ADVICE
    else:
        fix = OTHER_FIX
    return Finding(
        code="probe-degraded",
        severity="info",
        title=f"Hotspot sampling failed: {error}"[:200],
        detail="The loop waited for data, so dlprobe sampled the loading processes' stacks with py-spy to find "
        f"where the loading time goes, but the hotspot sampler (py-spy record) recorded nothing: {error}. "
        "So worker-hotspots (the functions the loading spends its time in) is missing from this report; "
        "the other findings do not depend on it.",
        fix=fix,
        evidence={
            "where": "hotspot sampler (py-spy record)",
            "status": stacks.status,
            "error": stacks.error,
            "missing": ["worker-hotspots"],
        },  # fmt: skip
    )


# The findings that read the processes' USS/PSS (smaps_rollup): what a process whose memory was refused is left out of.
MEMORY_CODES = ["cow-growth", "mapped-pages", "spawn-copy", "shm-pressure", "too-many-workers", "pin-memory"]


def _process_label(proc: ProcessRecord) -> str:
    if proc.role == "worker":
        return f"loader {proc.loader_id} worker {proc.worker_id} (pid {proc.pid})"
    return f"{proc.role} process (pid {proc.pid})"


def _memory_unread(run: RunData) -> Finding | None:
    """Processes whose memory (smaps_rollup) the sampler was refused: their growth is unknown, never zero."""
    unread = [p for p in run.processes if p.memory_unread is not None]
    if not unread:
        return None
    listed = "; ".join(f"{_process_label(p)}: {p.memory_unread}" for p in unread)
    workers = sum(p.role == "worker" for p in unread)
    return Finding(
        code="probe-degraded",
        severity="info",
        title=f"The memory of {len(unread)} process(es) could not be read: {listed}"[:200],
        detail=f"dlprobe was refused /proc/PID/smaps_rollup of {listed}. Their private (USS) and shared (PSS) "
        'memory is unknown, so the memory table says "not read" for them'
        + (f", the copy-on-write growth of {workers} worker(s) is not measured" if workers else "")
        + f", and {', '.join(MEMORY_CODES)} leave them out. A process that made itself non-dumpable "
        "(prctl PR_SET_DUMPABLE 0, some sandboxes and setuid helpers) or another user's is refused this way.",
        fix="Run dlprobe as the user that runs the training (or as root), and leave the workers dumpable.",
        evidence={
            "where": "memory sampler (smaps_rollup)",
            "processes": [{"pid": p.pid, "name": _process_label(p), "error": p.memory_unread} for p in unread],
            "missing": MEMORY_CODES,
        },
    )


def _unreadable(problems: list[dict[str, str]]) -> Finding:
    """What of the run directory load_run could not use: the rest of the report is what it could read."""
    listed = "; ".join(f"{p['file']}: {p['problem']}" for p in problems)
    return Finding(
        code="probe-degraded",
        severity="info",
        title=f"Could not read all of the run directory: {listed}"[:200],
        detail=f"Some of the run directory could not be read ({listed}), so this report is built from the rest: "
        "findings that need the missing records are absent or less certain. A run killed while writing, a copy "
        "interrupted, or a file edited by hand leaves a directory like this.",
        fix="Copy the run directory again from where it was recorded, or record the run again.",
        evidence={"where": "run directory", "unreadable": problems},
    )
