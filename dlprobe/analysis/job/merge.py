"""Per-rank findings merged across a job's ranks: one finding where ranks agree (each rank's evidence kept under
"ranks"), the rest labelled with their rank."""

from __future__ import annotations

import re
from typing import Any, cast

from dlprobe.analysis.evidence.finding import SEVERITIES, Finding
from dlprobe.analysis.evidence.rows import RankEvidence
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.findings.memory import COW_COPIED, COW_HEAP_WALK_FLOOR, COW_LOADED_AT_START
from dlprobe.analysis.job.model import Job, NodeMemory, RankView, node_of
from dlprobe.analysis.measures.worker_growth import row_growth
from dlprobe.units import format_bytes


def ranks_text(labels: list[str]) -> str:
    """ "ranks 0-3, 5" from ["rank 0", ... "rank 5"]; other labels (nodes, pids) are listed as they are."""
    numbers = [int(m.group(1)) for m in (re.fullmatch(r"rank (\d+)", label) for label in labels) if m]
    if len(numbers) != len(labels):
        return ", ".join(labels)
    numbers.sort()
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(spans)


def _max_severity(findings: list[Finding]) -> str:
    return min((f.severity for f in findings), key=SEVERITIES.index)


def _rank_entry(job: Job, view: RankView, finding: Finding) -> RankEvidence:
    own = cast("dict[str, Any]", finding.evidence)  # any code's: RankEvidence keeps it as the rank's finding had it
    return {"rank": job.label(view), "pid": view.pid, "title": finding.title, "evidence": own}


def _cow_title(job: Job, group: list[tuple[RankView, Finding]], labels: str) -> str:
    rows = [cast("dict[str, Any]", r) for _, f in group for r in f.evidence.get("workers") or []]
    grown = [r for r in rows if r.get("counted", row_growth(r) >= COW_HEAP_WALK_FLOOR)]
    variant = group[0][1].evidence.get("variant")
    copied = variant == COW_COPIED
    key = "cow_bytes" if copied else "anon_growth_bytes"
    peak = max((r.get(key, r.get("uss_growth_bytes")) or 0 for r in grown), default=0)
    lid = group[0][1].loader_id
    every = "every worker" if len(grown) == len(rows) else f"{len(grown)} of {len(rows)} workers"
    what = "copied up to {} of the parent's memory" if copied else "grew by up to {} of private memory"
    if variant == COW_LOADED_AT_START:
        what = "loaded its own copy of the same data at start, up to {}"
    title = f"Loader {lid} on {labels}: {every} {what.format(format_bytes(peak))} each"
    # The allocation story's attribute (attr_growth), where every rank's workers grew the same one most
    grown_attrs = {(f.evidence.get("growing_attributes") or [{}])[0].get("attribute") for _, f in group}
    if len(grown_attrs) == 1 and (attr := grown_attrs.pop()) is not None:
        title += f" (`{attr}` grows in them)"
    for memory in {node_of(job, v).node: node_of(job, v) for v, _ in group}.values():
        title += "; " + _node_total_text(job, memory)
    return title


def _node_total_text(job: Job, memory: NodeMemory) -> str:
    node_name = memory.node_rank if memory.node_rank is not None else memory.node
    where = f"node {node_name} total" if job.several_nodes else "node total"
    text = f"{where} {format_bytes(memory.pss_peak)}"
    return text + (f" of {format_bytes(memory.limit_bytes)}" if memory.limit_bytes else "")


def merged(job: Job, group: list[tuple[RankView, Finding]]) -> Finding:
    """One finding for the same code and loader on several ranks, with each rank's own evidence kept."""
    group.sort(key=lambda pair: pair[0].sort_key())
    first = group[0][1]
    same_node = len({v.node for v, _ in group}) == 1
    if same_node and all(f.title == first.title and f.evidence == first.evidence for _, f in group[1:]):
        # Read from the run directory's own files (the supervisor's cost, the machine), not from any rank's data:
        # every rank of the node sees it the same, so it is one finding of the node, not one per rank.
        return first
    labels = ranks_text([job.label(v) for v, _ in group])
    if first.code == "cow-growth":
        title = _cow_title(job, group, labels)
    else:
        title = f"On {labels}: {first.title}" + (" (the first of them; each in evidence)" if len(group) > 1 else "")
    detail = first.detail + f" Seen the same on {labels}."
    evidence: Evidence = {**first.evidence, "ranks": [_rank_entry(job, v, f) for v, f in group]}
    severity = _max_severity([f for _, f in group])
    if first.code == "cow-growth" and _node_share(job, group) > 0.5:
        severity = "error"  # each rank's workers alone stay below the alarm; the node's sum does not
    return Finding(first.code, severity, title, detail, first.fix, evidence, first.loader_id)


def _node_share(job: Job, group: list[tuple[RankView, Finding]]) -> float:
    """The largest share of a node's memory limit that the merged workers' USS peaks take together."""
    shares = []
    for memory in {node_of(job, v).node: node_of(job, v) for v, _ in group}.values():
        rows = [r for v, f in group if v.node == memory.node for r in f.evidence.get("workers") or []]
        total = sum(int(r.get("uss_peak_bytes") or 0) for r in rows)
        if memory.limit_bytes:
            shares.append(total / memory.limit_bytes)
    return max(shares, default=0.0)


def _labelled(job: Job, view: RankView, finding: Finding) -> Finding:
    label = job.label(view)
    finding.title = f"{label[0].upper()}{label[1:]}: {finding.title}"
    finding.evidence = {**finding.evidence, "rank": label, "rank_pid": view.pid}
    return finding


def merge_rank_findings(job: Job, per_rank: list[tuple[RankView, list[Finding]]]) -> list[Finding]:
    """Findings with the same code and loader on more than one rank become one; the rest keep their rank's label."""
    groups: dict[tuple[str, int | None, str], list[tuple[RankView, Finding]]] = {}
    order: list[tuple[str, int | None, str]] = []
    for view, findings in per_rank:
        for finding in findings:
            # Ranks that raised different errors did not fail the same way: each error keeps its own finding.
            what = f"{finding.evidence.get('type')}: {finding.evidence.get('message')}"
            key = (finding.code, finding.loader_id, what if finding.code == "script-error" else "")
            if key not in groups:
                order.append(key)
            groups.setdefault(key, []).append((view, finding))
    out = []
    for key in order:
        group = groups[key]
        # One rank with two findings of a code (two hangs) is not a cross-rank agreement.
        if len(group) > 1 and len({(v.node, v.pid) for v, _ in group}) == len(group):
            out.append(merged(job, group))
        else:
            out.extend(_labelled(job, v, f) for v, f in group)
    return out
