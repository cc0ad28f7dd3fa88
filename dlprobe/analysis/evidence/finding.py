"""The Finding every family returns: a stable code, how bad it is, what was seen and what to change. Its evidence
keys per code are evidence/schema.py's."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the types only: the schema module is the report's, loaded where the report is
    from dlprobe.analysis.evidence.schema import Evidence

SEVERITIES = ("error", "warning", "info")


def _no_evidence() -> Evidence:
    return {}


@dataclass
class Finding:
    """One diagnosis: a stable code, how bad it is, what was seen (evidence) and what to change (fix)."""

    code: str
    severity: str
    title: str
    detail: str
    fix: str
    evidence: Evidence = field(default_factory=_no_evidence)
    loader_id: int | None = None
    # Set by report/verdict.py:order_by_cause: the code of the finding that explains this one (a worker's OOM kill
    # by cow-growth), and why the severity is not the analyzer's own (a cause raised to what it explains).
    explained_by: str | None = None
    severity_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
