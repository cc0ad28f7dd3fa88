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
import re
from collections.abc import Callable
from typing import Any

from dlprobe.analysis.evidence.finding import SEVERITIES, Finding
from dlprobe.analysis.report.schema import Verdict
from dlprobe.torch_text import OUT_OF_DESCRIPTORS

# What a finding that grows memory explains: the OOM kill it leads to and the memory bound on workers it sets.
MEMORY_CAUSES = ("cow-growth", "spawn-copy", "attached-memory-growth")
SHM_CAUSES = ("shm-pressure", "shm-exhausted")
# Hangs whose stack shows a lock or a thread pool the worker inherited at fork (analysis/measures/stack_causes.py).
FORK_HANG_CAUSES = ("fork-lock", "openmp-fork", "opencv-threads")
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
# What the script's own uncaught exception can restate: a worker's death or a hang torch turned into an error.
_RESTATED_BY_SCRIPT_ERROR = ("worker-killed", "shm-exhausted", "bad-sample", "too-few-shards", "worker-hang")


def _same_loader(a: Finding, b: Finding) -> bool:
    return a.loader_id is None or b.loader_id is None or a.loader_id == b.loader_id


def _worker_name(finding: Finding) -> str:
    ev = finding.evidence
    worker = ev.get("worker_id")
    loader = f"loader {finding.loader_id} " if finding.loader_id is not None else ""
    return f"{loader}worker {worker}" if worker is not None else f"{loader}a worker".strip()


def _memory_explains(cause: Finding, symptom: Finding) -> str | None:
    if cause.code not in MEMORY_CAUSES or not _same_loader(cause, symptom):
        return None
    ev = symptom.evidence
    if symptom.code == "worker-killed" and ev.get("cause") == "oom":
        return f"the kernel's OOM kill of {_worker_name(symptom)} (worker-killed)"
    if symptom.code == "script-killed" and ev.get("cause") == "oom":
        return "the kernel's OOM kill of the training process (script-killed)"
    fit, workers = ev.get("workers_that_fit_memory"), ev.get("num_workers")
    if symptom.code == "too-many-workers" and isinstance(fit, int) and isinstance(workers, int) and fit < workers:
        return f"that only {fit} of {workers} workers fit the memory left (too-many-workers)"
    return None


def _shm_explains(cause: Finding, symptom: Finding) -> str | None:
    if cause.code not in SHM_CAUSES or not _same_loader(cause, symptom):
        return None
    if symptom.code == "worker-killed" and symptom.evidence.get("cause") == "bus":
        return f"the bus error that killed {_worker_name(symptom)} (worker-killed)"
    if cause.code == "shm-pressure" and symptom.code == "shm-exhausted":
        return "the full /dev/shm (shm-exhausted)"
    return None


def _fork_explains(cause: Finding, symptom: Finding) -> str | None:
    if cause.code != "fork-hazard" or symptom.code != "worker-hang" or not _same_loader(cause, symptom):
        return None
    if symptom.evidence.get("cause") in FORK_HANG_CAUSES:
        return f"the hang of {_worker_name(symptom)} (worker-hang)"
    return None


def _start_failure_explains(cause: Finding, symptom: Finding) -> str | None:
    """Workers that could not start (unpicklable dataset, no main guard): torch's "exited unexpectedly", the
    script's error, the loop waiting for a batch that never comes, all of that loader."""
    if cause.code != "worker-start-failed" or not _same_loader(cause, symptom):
        return None
    if symptom.code in ("worker-killed", "script-error", "main-hang", "worker-hang", "worker-error"):
        return f"{_worker_name(symptom) if symptom.code == 'worker-killed' else 'the'} {symptom.code}"
    return None


# A worker's error that is not the sample's (it loads alone, fails like every index, or was not checked).
_NOT_THE_SAMPLE = ("loads", "fails-any", "unverified", None)


def _shared_handle_explains(cause: Finding, symptom: Finding) -> str | None:
    """A handle the workers share, tied to a worker's error, explains that error when the sample is not at fault; and
    a worker hung reading that very descriptor (the same socket or pipe inode) waits on what they share: another
    worker took the reply it waits for."""
    if cause.code != "shared-handle" or not _same_loader(cause, symptom):
        return None
    waited_on = str(symptom.evidence.get("fd_target") or "")
    # Sockets and pipes only: the same inode is the same connection; a path read anew may be a hung mount's.
    holders: dict[Any, Any] = {}
    for handle in cause.evidence.get("handles") or []:
        if isinstance(handle, dict):
            holders.setdefault(handle.get("target"), handle.get("attribute"))  # the first object that holds it
    if symptom.code == "worker-hang" and waited_on.startswith(("socket:[", "pipe:[")) and waited_on in holders:
        held_by = f"`{holders[waited_on]}`" if holders[waited_on] else "the descriptor they share"
        return f"the hang of {_worker_name(symptom)} reading {held_by} (worker-hang)"
    if not cause.evidence.get("error_type"):
        return None
    if (
        symptom.code == "worker-error"
        and symptom.evidence.get("sample_alone") in _NOT_THE_SAMPLE
        and symptom.evidence.get("exception") == cause.evidence.get("error_type")
    ):
        raised = str(symptom.evidence.get("error") or "").split(":", 1)[0].strip()  # zlib.error, not torch's `error`
        name = raised if raised and " " not in raised else symptom.evidence.get("exception")
        return f"the {name} of {_worker_name(symptom)} (worker-error)"
    return None


def _fd_leak_explains(cause: Finding, symptom: Finding) -> str | None:
    """Descriptors that reached the limit explain every `Too many open files`, and the main process's EOFError (or
    lost connection) as torch's next receive fails for want of a descriptor."""
    if cause.code != "fd-leak":
        return None
    error = str(symptom.evidence.get("error") or symptom.evidence.get("message") or "")
    leaking = [row.get("pid") for row in cause.evidence.get("leaking") or [] if isinstance(row, dict)]
    hit = cause.evidence.get("hit_limit_pids") or []
    if (
        symptom.code == "worker-error"
        and OUT_OF_DESCRIPTORS.search(error)
        and symptom.evidence.get("pid") in leaking + hit
    ):
        return f"the `Too many open files` of {_worker_name(symptom)} (worker-error)"
    if not hit:
        return None
    dropped_for_descriptors = symptom.code == "batch-dropped" and OUT_OF_DESCRIPTORS.search(
        str(symptom.evidence.get("error") or "")
    )
    if dropped_for_descriptors and any(pid in hit for pid in symptom.evidence.get("pids") or []):
        return "the batches its workers could not send (batch-dropped)"
    sent = str(symptom.evidence.get("send_error") or "")
    if (
        symptom.code == "worker-hang"
        and symptom.evidence.get("cause") == "batch-lost"
        and symptom.evidence.get("pid") in hit
        and (not sent or OUT_OF_DESCRIPTORS.search(sent))  # an h5py handle in the batch is not the descriptors'
    ):
        # passing a batch's tensor to the loop takes a descriptor in the worker: at its limit, the batch is dropped
        return f"the lost batch of {_worker_name(symptom)} (worker-hang)"
    if symptom.code == "script-error" and (
        OUT_OF_DESCRIPTORS.search(error) or symptom.evidence.get("type") in ("EOFError", "ConnectionResetError")
    ):
        return f"the script's {symptom.evidence.get('type') or 'exception'} (script-error)"
    return None


def _dropped_batch_explains(cause: Finding, symptom: Finding) -> str | None:
    """A batch the worker's queue dropped is the batch the loop then waits for (a hang), or times out on."""
    if cause.code != "batch-dropped" or not _same_loader(cause, symptom):
        return None
    if symptom.code == "worker-hang" and symptom.evidence.get("cause") == "batch-lost":
        batch = symptom.evidence.get("batch")
        if batch in (cause.evidence.get("batches") or []) or symptom.evidence.get("pid") in (
            cause.evidence.get("pids") or []
        ):
            return f"the hang waiting for batch {batch} (worker-hang)"
    if symptom.code == "script-error" and "DataLoader timed out" in str(symptom.evidence.get("message") or ""):
        return "the script's DataLoader timeout (script-error)"
    return None


def _script_error_restates(cause: Finding, symptom: Finding) -> str | None:
    """The script's exception is torch re-raising what the cause already says (the worker's death, its exception)."""
    if symptom.code != "script-error" or cause.code not in _RESTATED_BY_SCRIPT_ERROR:
        return None
    message = str(symptom.evidence.get("message") or "")
    pids = [str(p) for p in cause.evidence.get("pids") or ([cause.evidence["pid"]] if "pid" in cause.evidence else [])]
    restated = (
        # torch's "DataLoader worker (pid 8913) is killed by signal" or "DataLoader worker (pid(s) 8913) exited
        # unexpectedly": the same worker
        ("DataLoader worker" in message and any(re.search(rf"\b{pid}\b", message) for pid in pids))
        or (cause.code == "bad-sample" and cause.evidence.get("exception") == symptom.evidence.get("type"))
        or (cause.code == "worker-hang" and "timed out" in message)
        or (cause.code in ("too-few-shards", "shm-exhausted") and "DataLoader worker" in message)
    )
    return f"the script's {symptom.evidence.get('type') or 'exception'} (script-error)" if restated else None


RULES: tuple[Callable[[Finding, Finding], str | None], ...] = (
    _memory_explains,
    _shm_explains,
    _fork_explains,
    _start_failure_explains,
    _shared_handle_explains,
    _fd_leak_explains,
    _dropped_batch_explains,
    _script_error_restates,
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
