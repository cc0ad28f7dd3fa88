"""The verdict: which finding is the cause of what went wrong, and the findings ordered by cause.

A run that went wrong often has several findings about one thing: copy-on-write growth (the cause), the kernel's OOM
kill of a worker (what it caused), torch's "DataLoader worker is killed" re-raised in the script (the same death
again). Read by severity alone, the symptoms lead and the cause is a warning at the bottom. Here each finding that
another one explains is marked `explained_by` it and put after it; a cause that explains an error (a death, a hang) is
raised to that severity with `severity_reason` saying why; and the verdict names the one cause that explains the most,
in one sentence with its numbers and the change to make. Pure: findings in, findings and a verdict out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dlprobe.analysis.evidence.finding import SEVERITIES, Finding
from dlprobe.analysis.findings import (
    descriptors,
    dropped_batch,
    memory,
    script,
    shared_handle,
    shm,
    start_failure,
    startup,
)
from dlprobe.analysis.report.schema import Verdict

# A death or a hang of the run: what a cause that explains one is raised to lead.
DEATH_CODES = (
    "worker-killed",
    "shm-exhausted",
    "bad-sample",
    "worker-error",
    "too-few-shards",
    "script-error",
    "script-killed",
    "worker-hang",
    "main-hang",
    "batch-dropped",
    "rank-failed",
    "attached-workers-gone",
    "attached-worker-stuck",
    "attached-loop-stuck",
)


# Each family's rules for what its causes explain, in the order they are asked (the first that answers is the reason).
RULES: tuple[Callable[[Finding, Finding], str | None], ...] = (
    memory.explains,
    shm.explains,
    startup.explains,
    start_failure.explains,
    shared_handle.explains,
    descriptors.explains,
    dropped_batch.explains,
    script.restates,
)


def _explanation(cause: Finding, symptom: Finding) -> str | None:
    if cause is symptom:
        return None
    for rule in RULES:
        reason = rule(cause, symptom)
        if reason:
            return reason
    return None


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


@dataclasses.dataclass
class _Node:
    finding: Finding
    position: int
    parent: int | None = None
    reason: str = ""
    children: list[int] = dataclasses.field(default_factory=list)


def _tree(findings: list[Finding]) -> list[_Node]:
    """Each finding's explainer: the first finding, in the analyzers' order, whose rule explains it. A finding that is
    already a symptom of another cannot explain that one back (no cycles)."""
    nodes = [_Node(f, i) for i, f in enumerate(findings)]
    for node in nodes:
        for other in nodes:
            reason = _explanation(other.finding, node.finding)
            if reason and not _explained_by_chain(nodes, other.position, node.position):
                node.parent, node.reason = other.position, reason
                other.children.append(node.position)
                break
    return nodes


def _explained_by_chain(nodes: list[_Node], start: int, ancestor: int) -> bool:
    at: int | None = start
    while at is not None:
        if at == ancestor:
            return True
        at = nodes[at].parent
    return False


def _descendants(nodes: list[_Node], at: int) -> list[int]:
    out: list[int] = []
    for child in sorted(nodes[at].children, key=lambda i: (_rank(nodes[i].finding.severity), i)):
        out += [child, *_descendants(nodes, child)]
    return out


def _raised(nodes: list[_Node], at: int) -> tuple[str, str | None]:
    """The severity a cause takes from the worst of what it explains, and why."""
    node = nodes[at]
    severity, reason = node.finding.severity, None
    for child in _descendants(nodes, at):
        explained = nodes[child]
        child_severity = _raised(nodes, child)[0] if explained.children else explained.finding.severity
        if _rank(child_severity) < _rank(severity):
            severity = child_severity
            reason = f"raised from {node.finding.severity}: it explains {explained.reason}"
    return severity, reason


def _leads(nodes: list[_Node], at: int) -> tuple[int, int, int, int]:
    """Sort key of a root cause: one that explains a death or a hang first, then the most explained, then the most
    severe, then the analyzers' order."""
    explained = _descendants(nodes, at)
    death = any(nodes[i].finding.code in DEATH_CODES for i in explained)
    return (0 if death else 1, -len(explained), _rank(_raised(nodes, at)[0]), at)


def judge(findings: list[Finding]) -> tuple[list[Finding], Verdict | None]:
    """The findings ordered by cause, and the verdict.

    Each cause is followed by what it explains (marked `explained_by`), and raised to the severity of what it explains
    (`severity_reason`); the leading cause comes first, then the other causes by severity. The verdict is that first
    cause when it is a warning or an error (notes alone make no verdict): its title with its numbers and what it
    explains, in one sentence, and its fix."""
    nodes = _tree(findings)
    roots = [n.position for n in nodes if n.parent is None]
    lead = min(roots, key=lambda i: _leads(nodes, i)) if roots else None
    rest = sorted((i for i in roots if i != lead), key=lambda i: (_rank(_raised(nodes, i)[0]), i))
    order: list[int] = []
    for root in ([lead] if lead is not None else []) + rest:
        order += [root, *_descendants(nodes, root)]
    ordered = []
    for i in order:
        node = nodes[i]
        severity, reason = _raised(nodes, i)
        explained_by = nodes[node.parent].finding.code if node.parent is not None else None
        ordered.append(dataclasses.replace(node.finding, severity=severity, severity_reason=reason,
                                           explained_by=explained_by))  # fmt: skip
    if lead is None or ordered[0].severity not in ("error", "warning"):
        return ordered, None
    cause = ordered[0]
    explained = _descendants(nodes, lead)
    sentence = cause.title.rstrip(". ")
    if explained:
        sentence += f"; this explains {_listed([nodes[i].reason for i in explained])}"
    verdict: Verdict = {
        "code": cause.code,
        "severity": cause.severity,
        "loader_id": cause.loader_id,
        "sentence": sentence + ".",
        "fix": cause.fix,
        "explains": list(dict.fromkeys(nodes[i].finding.code for i in explained)),
    }
    return ordered, verdict


def _listed(items: list[str]) -> str:
    unique = list(dict.fromkeys(items))
    return unique[0] if len(unique) == 1 else ", ".join(unique[:-1]) + f" and {unique[-1]}"
