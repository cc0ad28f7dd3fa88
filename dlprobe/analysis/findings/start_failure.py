"""What `--start-method` changed, and why a loader's workers could not start under spawn or forkserver.

`worker-start-failed` reads the `worker_start_failed` events (in_training/start_failures.py): the attribute pickle
refused, named in the training process as iter() raised, or the script's top-level line a worker re-running the
script reached without an `if __name__ == "__main__":` guard. `start-method-forced` says once what the run's
`--start-method` overrode, and where it could not apply (a torch without thread workers, a loader without workers).
"""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.common import same_loader, worker_name
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import (
    EV_START_METHOD_FORCED,
    EV_WORKER_START_FAILED,
    WORKER_START_MAIN_GUARD,
    WORKER_START_UNPICKLABLE,
)


def _loader_of_worker(run: RunData, pid: Any, fallback: Any) -> int | None:
    """The loader whose worker `pid` was (the parent's ids; a worker numbers loaders as it re-runs the script)."""
    for worker in run.workers():
        if worker.pid == pid and worker.loader_id is not None:
            return worker.loader_id
    return fallback if isinstance(fallback, int) else None


def _unpicklable(ev: dict[str, Any]) -> Finding:
    method = ev.get("start_method") or "spawn/forkserver"
    path, reason = ev.get("path") or "the dataset", ev.get("reason") or "pickle refused it"
    return Finding(
        code="worker-start-failed",
        severity="error",
        title=f"Loader {ev.get('loader')}'s workers could not start under {method}: `{path}` cannot be pickled "
        f"({reason})",
        detail=f"Under {method} the training process pickles the dataset, collate_fn and worker_init_fn into every "
        f"worker; pickle refused `{path}` ({ev.get('object_type')}): {ev.get('error')}. Under fork nothing is "
        "pickled, so the same script ran there.",
        fix=f"Make `{path}` picklable: a module-level function or class instead of a lambda or a local one "
        "(functools.partial of a module-level function keeps its arguments), and a file, database or lock opened "
        "in the worker (lazily in __getitem__ or in worker_init_fn) rather than held by the dataset; or keep "
        "multiprocessing_context='fork' where fork is safe.",
        evidence={
            "failure": WORKER_START_UNPICKLABLE,
            "start_method": ev.get("start_method"),
            "attribute_path": ev.get("path"),
            "object_type": ev.get("object_type"),
            "pickle_reason": ev.get("reason"),
            "error": ev.get("error"),
        },
        loader_id=ev.get("loader") if isinstance(ev.get("loader"), int) else None,
    )


def _main_guard(run: RunData, events: list[dict[str, Any]]) -> Finding:
    ev = events[0]
    method = ev.get("start_method") or "spawn/forkserver"
    pids = sorted({e["pid"] for e in events if isinstance(e.get("pid"), int)})
    loader = _loader_of_worker(run, ev.get("pid"), ev.get("loader"))
    where = f"{ev.get('file')}:{ev.get('line')}" if ev.get("file") else "the script's top level"
    return Finding(
        code="worker-start-failed",
        severity="error",
        title=f"Loader {loader}'s workers died at start under {method}: the script has no "
        '`if __name__ == "__main__":` guard',
        detail=f"Under {method} each worker imports the script again; without the guard it runs the script's top "
        f"level, reaches the loop at {where} and tries to start workers of its own, which multiprocessing refuses "
        f'("...before the current process has finished its bootstrapping phase"). {len(pids)} worker(s) died so '
        f"(pid {', '.join(map(str, pids))}); torch reports them as exited unexpectedly.",
        fix='Put the script\'s work in a function and call it under `if __name__ == "__main__":` (imports, '
        "classes and functions stay at the top level); a worker then imports the script without training.",
        evidence={
            "failure": WORKER_START_MAIN_GUARD,
            "start_method": ev.get("start_method"),
            "file": ev.get("file"),
            "line": ev.get("line"),
            "pids": pids,
            "error": ev.get("error"),
        },
        loader_id=loader,
    )


def find_worker_start_failures(run: RunData) -> list[Finding]:
    failed = [e for e in run.events if e.get("ev") == EV_WORKER_START_FAILED]
    findings: list[Finding] = []
    said: set[Any] = set()
    for ev in failed:
        if ev.get("kind") == WORKER_START_UNPICKLABLE and ("pickle", ev.get("loader")) not in said:
            said.add(("pickle", ev.get("loader")))
            findings.append(_unpicklable(ev))
    guard = [e for e in failed if e.get("kind") == WORKER_START_MAIN_GUARD]
    if guard:
        findings.append(_main_guard(run, guard))
    return findings


def find_start_method_forced(run: RunData) -> list[Finding]:
    forced = run.meta.get("start_method_forced")
    events = [e for e in run.events if e.get("ev") == EV_START_METHOD_FORCED]
    if not forced and not events:
        return []
    method = forced or events[0].get("forced")
    applied = [e for e in events if e.get("applied")]
    overridden = [e for e in applied if e.get("script_choice") and e.get("script_choice") != method]
    not_applied = [e for e in events if not e.get("applied")]
    parts = []
    if applied:
        loaders = ", ".join(str(e.get("loader")) for e in applied)
        parts.append(f"loader(s) {loaders} started their workers with {method}")
    for e in overridden:
        parts.append(
            f"loader {e.get('loader')}'s own multiprocessing_context ({e.get('script_choice')}) was overridden"
        )
    defaults = {e.get("default") for e in applied if not e.get("script_choice") and e.get("default")}
    if defaults:
        parts.append(f"the others named none (this Python's default: {', '.join(sorted(map(str, defaults)))})")
    reasons: list[str] = []
    for e in not_applied:  # the same reason (no thread workers in this torch) is said once
        reason = str(e.get("reason") or "not applied")
        if reason not in reasons:
            reasons.append(reason)
    if reasons:
        parts.append("not applied: " + "; ".join(reasons))
    if not events:
        parts.append("no loader was iterated, so no worker was started with it")
    title = f"--start-method {method}: " + (parts[0] if parts else "asked for")
    if overridden:
        title += ", overriding the script's own " + ", ".join(
            f"{e.get('script_choice')} (loader {e.get('loader')})" for e in overridden
        )
    return [
        Finding(
            code="start-method-forced",
            severity="info",
            title=title,
            detail="This run started every DataLoader's workers with the method given to `dlprobe run "
            f"--start-method` instead of the script's own: {'; '.join(parts)}. Memory per worker, time to the first "
            "batch and what broke are this method's; `dlprobe compare RUN_A RUN_B` sets two runs side by side.",
            fix="Nothing to fix: to keep a method, set it in the script "
            f"(DataLoader(..., multiprocessing_context='{method}')).",
            evidence={
                "forced_method": method,
                "overridden": [
                    {"loader": e.get("loader"), "script_choice": e.get("script_choice")} for e in overridden
                ],
                "not_applied": [{"loader": e.get("loader"), "reason": e.get("reason")} for e in not_applied],
            },
        )
    ]


def explains(cause: Finding, symptom: Finding) -> str | None:
    """Workers that could not start (unpicklable dataset, no main guard): torch's "exited unexpectedly", the
    script's error, the loop waiting for a batch that never comes, all of that loader."""
    if cause.code != "worker-start-failed" or not same_loader(cause, symptom):
        return None
    if symptom.code in ("worker-killed", "script-error", "main-hang", "worker-hang", "worker-error"):
        return f"{worker_name(symptom) if symptom.code == 'worker-killed' else 'the'} {symptom.code}"
    return None
