"""One report, one piece of advice: where two findings' fixes would send the user opposite ways, each is told what
the other found.

The case from users' reports: a lock held by a thread as the workers fork hangs a worker, and its fix says
"or multiprocessing_context='forkserver'/'spawn'"; the start-method finding of the same run says the dataset would
not start under forkserver or spawn (a lambda, no `__main__` guard) and ends "until then, force fork", the setting
that hangs. Neither is wrong alone. Together: under fork, fix the thread (or its lock); the way to forkserver or
spawn goes through the start-method finding's changes first; and forcing fork is no answer while fork hangs.
"""

from __future__ import annotations

import re
from dataclasses import replace

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.start_method import KEEP_FORK

# A fix that sends the loader to another start method
_LEAVE_FORK = re.compile(
    r"forkserver'?\s*(or|/)\s*'?spawn|spawn'?\s*(or|/)\s*'?forkserver|context='(spawn|forkserver)'"
)


def _same_loader(a: Finding, b: Finding) -> bool:
    return a.loader_id is None or b.loader_id is None or a.loader_id == b.loader_id


def agree(findings: list[Finding]) -> list[Finding]:
    """The findings, with each fix that another finding contradicts amended to say so (order and codes kept)."""
    blocked = [f for f in findings if f.code == "start-method" and f.evidence.get("blockers")]
    leaving = [f for f in findings if f.code != "start-method" and _LEAVE_FORK.search(f.fix)]
    pairs = [(s, h) for s in blocked for h in leaving if _same_loader(s, h)]
    if not pairs:
        return findings
    out = []
    for finding in findings:
        if finding in leaving:
            start = next(s for s, h in pairs if h is finding)
            finding = replace(finding, fix=finding.fix + _first_make_it_start(start))
        elif finding in blocked:
            hazards = [h for s, h in pairs if s is finding]
            # the cause a hang is explained by (fork-hazard) over the hang it explains
            hazard = next((h for h in hazards if h.code == "fork-hazard"), hazards[0] if hazards else None)
            if hazard is not None:
                finding = replace(finding, fix=_no_forced_fork(finding.fix, hazard))
        out.append(finding)
    return out


def _first_make_it_start(start: Finding) -> str:
    return (
        f" This loader's workers would not start under forkserver or spawn as it is (start-method: "
        f"{_blocker_words(start)}): make those changes first, or fix the cause under fork."
    )


def _no_forced_fork(fix: str, hazard: Finding) -> str:
    kept = fix.replace(KEEP_FORK, "")
    return kept + f" Forcing fork keeps this run's {hazard.code} ({_short(hazard.title)}): under fork, fix that first."


def _blocker_words(start: Finding) -> str:
    blockers = start.evidence.get("blockers") or []
    words = [str(b.get("attribute") or b.get("what")) + f" ({b.get('kind')})" for b in blockers[:2] if b]
    return ", ".join(words) or "see that finding"


def _short(title: str, limit: int = 90) -> str:
    return title if len(title) <= limit else title[: limit - 3].rstrip() + "..."
