"""Findings about the probe itself: what it could not record in this run, and why."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.model import Finding, RunData
from dlprobe.rundir.schema import EV_PROBE_ERROR


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
    for entry in _failures(run).values():
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
                evidence=entry,
            )
        )
    return findings
