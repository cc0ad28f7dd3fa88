"""Ranks the candidate causes of a logged failure (most likely first), names the rank each came from, and says how
to reproduce the top one under the probe."""

from __future__ import annotations

import shlex
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.system.kernlog import parse_oom_lines
from dlprobe.triage.candidate import Candidate
from dlprobe.triage.deaths import main_killed_candidates, signal_candidates
from dlprobe.triage.logscan import LogScan
from dlprobe.triage.machine import MachineFacts
from dlprobe.triage.messages import (
    collate_candidates,
    exception_candidates,
    shm_alloc_candidates,
    special_candidates,
    timeout_candidates,
    warning_candidates,
)


def diagnose(scan: LogScan, machine: MachineFacts, failed_at: float) -> list[Finding]:
    """The likely causes, most likely first; failures (severity error) before warnings."""
    kills = list(machine.kernel.kills) + parse_oom_lines(m.text for m in scan.of("kernel-oom"))
    candidates = (
        shm_alloc_candidates(scan, machine)
        + special_candidates(scan, machine)
        + collate_candidates(scan)
        + exception_candidates(scan)
        + signal_candidates(scan, machine, kills, failed_at)
        + timeout_candidates(scan)
        + main_killed_candidates(scan, machine, kills, failed_at)
        + warning_candidates(scan)
    )
    candidates.sort(key=lambda c: (-c.score, c.line))
    for candidate in candidates:
        _name_rank(candidate, scan)
    return [c.finding for c in candidates]


def _rank_at(scan: LogScan, line: int) -> int | None:
    """The rank whose "[rankN]:" prefix the finding's line (or the traceback it ends) carried."""
    for m in scan.matches:
        if m.line == line and m.fields.get("rank") is not None:
            return int(m.fields["rank"])
    for block in scan.tracebacks:
        if block.rank is not None and block.start_line <= line <= (block.end_line or block.start_line):
            return block.rank
    return None


def _name_rank(candidate: Candidate, scan: LogScan) -> None:
    """Say which rank a failure came from: its own lines' prefix, else torchrun's root cause (the first rank
    that failed, which is the failure a log's findings explain)."""
    finding = candidate.finding
    rank, source = _rank_at(scan, candidate.line), "line prefix"
    if rank is None and finding.severity == "error" and scan.root_cause_rank is not None:
        rank, source = scan.root_cause_rank, "torchrun root cause"
    if rank is None:
        return
    finding.title += f" (rank {rank})"
    finding.evidence["rank"] = f"rank {rank}"  # a label, as a job's report names its ranks
    finding.evidence["rank_from"] = source
    if scan.root_cause_rank == rank and scan.root_cause_local_rank is not None:
        finding.evidence["local_rank"] = scan.root_cause_local_rank


def reproduce(scan: LogScan, findings: list[Finding]) -> dict[str, Any]:
    """The `dlprobe run` command that would show the top cause under the probe."""
    script = scan.script
    options: list[str] = []
    env = ""
    note = "add the script's own arguments" if script else "the log does not show the script's path: use yours"
    top = findings[0] if findings and findings[0].severity == "error" else None
    if top is not None:
        cause = top.evidence.get("cause")
        if top.code == "worker-hang":
            timeout = float(top.evidence.get("timeout_s") or 0)
            # The probe must see the stall before PyTorch's own timeout raises.
            hang = max(1, int(timeout / 2)) if timeout else 30
            options = ["--hang-timeout", str(hang)]
            note += f"; --hang-timeout {hang} is below the DataLoader's timeout so the stacks are dumped first"
        elif cause in ("fork-shared-handle", "shared-state"):
            note += ("; it names the dataset's object that the workers share across the fork (`shared-handle`) and "
                     "loads the failing index again alone")  # fmt: skip
        elif cause in ("segfault", "abort", "fpe", "bus"):
            env = "PYTHONFAULTHANDLER=1 "
            note += "; PYTHONFAULTHANDLER=1 makes the crashing worker print its Python stack"
    parts = ["dlprobe", "run", *options, shlex.quote(script) if script else "train.py"]
    return {"command": env + " ".join(parts) + " ...", "script": script, "note": note}
