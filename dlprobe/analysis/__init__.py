"""Pure analyzers: each takes a loaded run and returns findings; nothing here reads files or prints."""

from __future__ import annotations

from collections.abc import Callable

from dlprobe.analysis import (
    attach_findings,
    batch_findings,
    death_findings,
    hang_findings,
    hotspot_findings,
    memory_findings,
    probe_findings,
    run_findings,
    shm_findings,
    startup_findings,
    throughput_findings,
)
from dlprobe.analysis.model import SEVERITIES, Finding, RunData

Analyzer = Callable[[RunData], list[Finding]]

ANALYZERS: list[Analyzer] = [
    hang_findings.find_hangs,  # the specific diagnoses first: they explain a script-error that follows
    death_findings.find_worker_deaths,
    run_findings.find_run_problems,
    memory_findings.find_cow_growth,
    memory_findings.find_spawn_copy,
    shm_findings.find_shm_pressure,
    throughput_findings.find_input_bound,
    throughput_findings.find_too_many_workers,
    throughput_findings.find_idle_workers,
    throughput_findings.find_pin_memory,
    batch_findings.find_dtype_waste,
    batch_findings.find_iterable_duplicates,
    startup_findings.find_slow_start,
    startup_findings.find_fork_hazard,
    hotspot_findings.find_worker_hotspots,
    probe_findings.find_probe_degraded,
    # `dlprobe attach` only (they return nothing for other runs): the outside view of a job already running
    attach_findings.find_attached_stuck,
    attach_findings.find_attached_growth,
    attach_findings.find_attached_workers_gone,
    attach_findings.find_attached_outside_view,
]


def analyze(run: RunData) -> list[Finding]:
    """Every finding for a run, most severe first."""
    findings = [f for analyzer in ANALYZERS for f in analyzer(run)]
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
