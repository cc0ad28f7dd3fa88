"""A job's hang: one rank's stuck worker stalls the other ranks in a collective (all_reduce, barrier), which is
one hang of the job, not one per rank."""

from __future__ import annotations

import re
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.rows import WaitingRank
from dlprobe.analysis.job.merge import ranks_text
from dlprobe.analysis.job.model import Job, RankView
from dlprobe.analysis.measures.stack_causes import frame_text, main_thread

HANG_CODES = ("worker-hang", "main-hang")

_COLLECTIVE = re.compile(
    r"^(all_reduce|all_gather\w*|allgather\w*|reduce_scatter\w*|broadcast\w*|barrier|monitored_barrier|reduce|"
    r"all_to_all\w*|gather|scatter|send|recv|_wait|wait|wait_stream|_sync_params_and_buffers|_sync_module_states)$"
)
_DISTRIBUTED_FILE = re.compile(r"torch/distributed/|c10d|ProcessGroup|torch/nn/parallel/distributed\.py|lightning")


def _collective_frame(proc: dict[str, Any]) -> str | None:
    """The torch.distributed call a process waits in (all_reduce, barrier, ...), from its hang stack: the Python
    frame where there is one (the native c10d::Work::wait below it says less), and the user's line that called it."""
    thread = main_thread(proc.get("stack") or [])
    frames = (thread or {}).get("frames") or []
    found = []
    for frame in frames:
        name = str(frame.get("name") or "").rsplit("::", 1)[-1].rsplit(".", 1)[-1]
        if _COLLECTIVE.match(name) and _DISTRIBUTED_FILE.search(str(frame.get("file") or "") + str(frame.get("name"))):
            found.append(frame)
    if not found:
        return None
    frame = next((f for f in found if not f.get("native")), found[0])
    caller = next((f for f in frames if f.get("user") and not f.get("native")), None)
    return frame_text(frame) + (f", called from {frame_text(caller)}" if caller else "")


def _waiting_ranks(job: Job, view: RankView) -> list[WaitingRank]:
    """The other ranks of the same hang: where each one's training process was when the hang was recorded."""
    waiting: list[WaitingRank] = []
    records = [h for h in job.runs[view.node].hangs if h.get("main_pid") == view.pid]
    for other in job.ranks:
        if other is view:
            continue
        entry = None
        # Pids repeat across nodes: another node's rank is looked up in its own node's records only.
        node_records = records if other.node == view.node else job.runs[other.node].hangs
        for record in node_records + [h for h in job.runs[other.node].hangs if h not in node_records]:
            entry = next((p for p in record.get("processes") or [] if p.get("pid") == other.pid), None)
            if entry is not None:
                break
        frame = _collective_frame(entry) if entry else None
        waiting.append({"rank": job.label(other), "pid": other.pid, "collective": frame, "stack_seen": bool(entry)})
    return waiting


def job_hang(job: Job, per_rank: list[tuple[RankView, list[Finding]]]) -> None:
    """One rank's stuck worker stalls the others in a collective: one finding naming that rank, not N hangs."""
    stuck = [(v, f) for v, fs in per_rank for f in fs if f.code == "worker-hang" and f.severity == "error"]
    if not stuck:
        return
    view, finding = stuck[0]
    waiting = _waiting_ranks(job, view)
    in_collective = [w for w in waiting if w["collective"]]
    finding.evidence["waiting_ranks"] = waiting
    if in_collective:
        labels = ranks_text([w["rank"] for w in in_collective])
        verb = "waits" if len(in_collective) == 1 else "wait"
        finding.title += f"; {labels} {verb} for it in {str(in_collective[0]['collective']).split(' ')[0]}"
        finding.detail += (
            " Every other rank waits for this one inside a collective ("
            + "; ".join(f"{w['rank']} in {w['collective']}" for w in in_collective)
            + "), so the whole job stands still until its process group times out."
        )
    # The other ranks' own hang records (a loop that stalls behind the collective) are this same hang.
    for other, findings in per_rank:
        if other is view:
            continue
        findings[:] = [f for f in findings if f.code not in HANG_CODES or not _waits_in_collective(other, f)]


def _waits_in_collective(view: RankView, finding: Finding) -> bool:
    for record in view.run.hangs:
        main = next((p for p in record.get("processes") or [] if p.get("pid") == view.pid), None)
        if main is not None and _collective_frame(main):
            return True
    return finding.code == "main-hang" and "collective" in finding.title
