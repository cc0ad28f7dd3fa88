"""Pure analyzers: each takes a loaded run and returns findings; nothing here reads files or prints.

The floors, each importing only those below it (import-linter contracts in pyproject.toml): report/ (verdict, schema,
timeline, trace), job/ (several ranks), this package's analyze(), findings/ (one module per family of causes, none
importing another), measures/ (numbers about a run), run/ (the run as read back) and evidence/ (Finding, the
evidence each code carries)."""

from __future__ import annotations

import traceback
from collections.abc import Callable

from dlprobe.analysis import advice_agreement
from dlprobe.analysis.evidence.finding import SEVERITIES, Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.findings import (
    attach,
    batch,
    descriptors,
    dropped_batch,
    gc_copy,
    hangs,
    hotspots,
    loop_bound,
    memory,
    probe,
    repeats,
    script,
    shared_handle,
    shm,
    spawn_copy,
    start_failure,
    start_method,
    startup,
    threads,
    throughput,
    worker_use,
)
from dlprobe.analysis.findings.deaths import worker_deaths
from dlprobe.analysis.run.model import RunData
from dlprobe.torch_text import caught_in_worker_process

Analyzer = Callable[[RunData], list[Finding]]

ANALYZERS: list[Analyzer] = [
    start_failure.find_worker_start_failures,  # the cause of the deaths, hangs and errors that follow
    dropped_batch.find_dropped_batches,  # before the hang or the timeout a dropped batch leads to
    hangs.find_hangs,  # the specific diagnoses first: they explain a script-error that follows
    worker_deaths.find_worker_deaths,
    shared_handle.find_shared_handles,  # before a worker's error is read as a bad sample or the script's
    descriptors.find_fd_leak,  # before script-error: it names the process a `Too many open files` came from
    script.find_run_problems,
    memory.find_cow_growth,
    spawn_copy.find_spawn_copy,
    gc_copy.find_gc_copy,
    shm.find_shm_pressure,
    throughput.find_input_bound,
    throughput.find_too_many_workers,
    worker_use.find_idle_workers,
    loop_bound.find_loop_bound,
    worker_use.find_pin_memory,
    batch.find_dtype_waste,
    batch.find_iterable_duplicates,
    repeats.find_shared_rng,
    repeats.find_same_order,
    startup.find_slow_start,
    startup.find_fork_hazard,
    start_method.find_start_method,
    hotspots.find_worker_hotspots,
    threads.find_thread_workers,
    start_failure.find_start_method_forced,
    probe.find_probe_degraded,
    # `dlprobe attach` only (they return nothing for other runs): the outside view of a job already running
    attach.find_attached_stuck,
    attach.find_attached_growth,
    attach.find_attached_workers_gone,
    attach.find_attached_outside_view,
]

# The codes each analyzer can give: what a report lacks when that analyzer fails (tests check the list is complete).
ANALYZER_CODES: dict[str, tuple[str, ...]] = {
    "find_worker_start_failures": ("worker-start-failed",),
    "find_start_method_forced": ("start-method-forced",),
    "find_dropped_batches": ("batch-dropped",),
    "find_hangs": ("worker-hang", "main-hang"),
    "find_worker_deaths": (
        "worker-killed",
        "bad-sample",
        "worker-error",
        "sampler-out-of-range",
        "too-few-shards",
        "shm-exhausted",
    ),  # fmt: skip
    "find_shared_handles": ("shared-handle",),
    "find_fd_leak": ("fd-leak",),
    "find_run_problems": ("script-error", "script-killed", "no-loader"),
    "find_cow_growth": ("cow-growth", "mapped-pages"),
    "find_spawn_copy": ("spawn-copy",),
    "find_gc_copy": ("gc-copy",),
    "find_shm_pressure": ("shm-pressure",),
    "find_input_bound": ("input-bound",),
    "find_too_many_workers": ("too-many-workers",),
    "find_idle_workers": ("idle-workers",),
    "find_loop_bound": ("loop-bound",),
    "find_pin_memory": ("pin-memory",),
    "find_dtype_waste": ("dtype-waste",),
    "find_iterable_duplicates": ("iterable-duplicates",),
    "find_shared_rng": ("shared-rng",),
    "find_same_order": ("same-order-every-epoch",),
    "find_slow_start": ("slow-start", "remedy-cost"),
    "find_fork_hazard": ("fork-hazard",),
    "find_start_method": ("start-method",),
    "find_worker_hotspots": ("worker-hotspots",),
    "find_thread_workers": ("thread-workers",),
    "find_probe_degraded": ("probe-degraded",),
    "find_attached_stuck": ("attached-worker-stuck", "attached-loop-stuck"),
    "find_attached_growth": ("attached-memory-growth",),
    "find_attached_workers_gone": ("attached-workers-gone",),
    "find_attached_outside_view": ("attached-no-stacks", "attached-shm-full", "attached-outside-view"),
}


# torch's wrapper for an exception raised in a worker, as the script re-raised it
# The findings that explain one worker's exception: the script's error is that same exception, re-raised.
WORKER_EXCEPTION_CODES = ("bad-sample", "worker-error", "sampler-out-of-range")


def _same_process(a: Finding, b: Finding) -> bool:
    """In a job, both findings are of the same rank (labelled by the merge); in a single run, always."""
    ranks_a = {str(a.evidence.get("rank") or "")} | {str(r.get("rank")) for r in a.evidence.get("ranks") or []}
    ranks_b = {str(b.evidence.get("rank") or "")} | {str(r.get("rank")) for r in b.evidence.get("ranks") or []}
    return bool(ranks_a & ranks_b)


def fold_script_errors(findings: list[Finding]) -> list[Finding]:
    """One finding per failure: a script-error that is a worker's exception re-raised by torch ("Caught OSError in
    DataLoader worker process 2.") is dropped when a worker finding explains that exception, which takes the line
    where the script stopped. A script-error read as another rank's consequence ("after rank 1 failed") stays."""
    kept: list[Finding] = []
    for finding in findings:
        message = str(finding.evidence.get("message") or "")
        caught = caught_in_worker_process(message) if finding.code == "script-error" else None
        match = None
        if caught is not None and "after_rank" not in finding.evidence:
            match = next(
                (
                    f
                    for f in findings
                    if f.code in WORKER_EXCEPTION_CODES
                    and (f.evidence.get("exception"), f.evidence.get("worker_id")) == caught
                    and _same_process(f, finding)
                ),
                None,
            )
        if match is None:
            kept.append(finding)
            continue
        if finding.evidence.get("file"):
            where = f"{str(finding.evidence['file']).rsplit('/', 1)[-1]}:{finding.evidence.get('line')}"
            match.evidence["script_stopped_at"] = where
            match.detail += f" The script stopped with it ({where})."
    return kept


def failure_where(exc: BaseException) -> str:
    """file:line of the innermost frame that raised, relative to the package where it is dlprobe's own."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    path = last.filename.replace("\\", "/")
    short = path[path.rfind("dlprobe/") :] if "dlprobe/" in path else path.rsplit("/", 1)[-1]
    return f"{short}:{last.lineno} in {last.name}"


def failure_message(exc: BaseException, limit: int = 300) -> str:
    """The exception's first line, cut to `limit` characters: one sentence for a title, a row or a problem list."""
    text = str(exc)
    return text.splitlines()[0][:limit] if text else ""


def analysis_failed(part: str, exc: Exception, missing: tuple[str, ...] | list[str], what: str) -> Finding:
    """A part of dlprobe's own analysis (an analyzer, a cross-rank check, a renderer) raised: the rest of the report
    stands, and this finding says which findings it may lack and why (a bug to report, or a damaged run directory)."""
    message = failure_message(exc)
    missing_text = ", ".join(missing) if missing else "nothing else"
    evidence: Evidence = {
        "where": part,
        "type": type(exc).__name__,
        "message": message,
        "raised_at": failure_where(exc),
        "missing": list(missing),
    }
    return Finding(
        code="probe-degraded",
        severity="info",
        title=f"dlprobe's {what} {part} failed with {type(exc).__name__}: {message}"[:200],
        detail=f"{what.capitalize()} {part} raised {type(exc).__name__}: {message} (at {evidence['raised_at']}). "
        f"So this report may lack: {missing_text}. The rest of the report does not depend on it.",
        fix="This is a bug in dlprobe or a damaged run directory: report it with this message and the run "
        "directory; `dlprobe report DIR` reads the directory again once it is fixed.",
        evidence=evidence,
    )


def analyze(run: RunData, fold: bool = True) -> list[Finding]:
    """Every finding for a run, most severe first; an analyzer that raises becomes a probe-degraded finding.
    `fold`: a script-error that is a worker's exception re-raised goes into that worker's finding (a job folds
    once its ranks' errors are ordered: analyze_job)."""
    findings: list[Finding] = []
    for analyzer in ANALYZERS:
        name = getattr(analyzer, "__name__", repr(analyzer))
        try:
            findings.extend(analyzer(run))
        except Exception as exc:  # one analyzer's bug must not take every other finding down with it
            findings.append(analysis_failed(name, exc, ANALYZER_CODES.get(name, ()), "analyzer"))
    if fold:
        findings = fold_script_errors(findings)
    try:
        findings = advice_agreement.agree(findings)
    except Exception as exc:  # the findings stand as the analyzers made them
        findings.append(analysis_failed("advice_agreement.agree", exc, (), "analyzer"))
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
