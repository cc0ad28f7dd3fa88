"""Hang findings: `worker-hang` (a worker holds the batch the loop waits for and makes no progress, or made it and the
batch never arrived) and `main-hang` (the training process itself is stuck while the workers are idle), from the hang
records."""

from __future__ import annotations

from typing import Any, Literal

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence, as_evidence
from dlprobe.analysis.findings.common import PICKLABLE_BATCH_FIX
from dlprobe.analysis.measures.stack_causes import (
    FORK_LOCK_OTHER_METHODS,
    Cause,
    classify,
    frame_text,
    indices_text,
    innermost_user_frame,
    main_thread,
    main_wait_cause,
    own_frames,
    user_frames,
)
from dlprobe.analysis.measures.start_blockers import OTHER_METHODS, other_methods
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.handle import hang_record_ref
from dlprobe.rundir.schema import (
    EV_BATCH_SEND_ERROR,
    EV_BATCHES,
    EV_FORK_STATE,
    HangRecord,
)
from dlprobe.system.pyspy import STOPPED_STATES

BUSY_PHASES = ("getitem", "collate", "worker_init_fn")
MAX_STACK_LINES = 12


def _fork_threads(run: RunData, loader_id: int | None) -> list[str] | None:
    states = [e for e in run.events if e.get("ev") == EV_FORK_STATE and e.get("loader") == loader_id]
    if not states:
        return None
    threads = states[-1].get("python_threads") or []
    return [t["name"] if isinstance(t, dict) else str(t) for t in threads]


def _age(slot: dict[str, Any], t: float) -> float | None:
    since = slot.get("t_sample") or slot.get("t_fetch")
    return round(t - since, 1) if since else None


def _stuck_workers(record: HangRecord, loader_id: int | None) -> list[dict[str, Any]]:
    """The workers holding a batch: the one the loop waits for first, then any other that is busy too."""
    loop = record.get("loop") or {}
    awaited = loop.get("awaited_worker")
    busy = []
    for proc in record.get("processes") or []:
        slot = proc.get("inflight") or {}
        if proc.get("role") != "worker" or slot.get("phase") not in BUSY_PHASES:
            continue
        if loader_id is not None and proc.get("loader_id") not in (loader_id, None):
            continue
        busy.append(proc)
    waited = record.get("waited_s") or 0.0
    awaited_procs = [p for p in busy if awaited is not None and p.get("worker_id") == awaited]
    # other workers count as stuck only if they have held their sample about as long as the loop has waited
    others = [p for p in busy if p not in awaited_procs and (_age(p["inflight"], record["t"]) or 0) >= 0.8 * waited]
    return awaited_procs + others


def _lost_batch(run: RunData, record: HangRecord) -> tuple[dict[str, Any], list[Any]] | None:
    """The awaited worker and its ring row for the batch the loop waits for, where that worker already made it in
    this epoch: the batch left the fetch and never reached the loop. None where the worker has not made it."""
    loop = record.get("loop") or {}
    awaited, task, loader_id = loop.get("awaited_worker"), loop.get("awaited_task"), loop.get("loader_id")
    if awaited is None or task is None:
        return None
    lo = run.loader(loader_id) if loader_id is not None else None
    # batch numbers start again each epoch: only a row made since this epoch's iterator began is the awaited batch
    began = max((e.t_start for e in lo.epochs if e.t_start <= record["t"]), default=None) if lo else None
    if began is None:
        return None
    for proc in record.get("processes") or []:
        if proc.get("role") != "worker" or proc.get("worker_id") != awaited:
            continue
        if proc.get("loader_id") not in (loader_id, None):
            continue
        for row in (proc.get("inflight") or {}).get("recent") or []:
            if len(row) >= 4 and row[0] == task and row[1] >= began:
                return proc, row
    return None


def _send_error(run: RunData, pid: int | None, task: int, made_from: float) -> str | None:
    """The error the worker's queue recorded as it dropped this batch (in_training/send_errors.py), if it did: the
    same worker, the same batch number, after the batch was begun (a persistent worker numbers each epoch anew)."""
    for event in run.events:
        if event.get("ev") != EV_BATCH_SEND_ERROR or event.get("pid") != pid or event.get("task") != task:
            continue
        if (event.get("t") or 0.0) >= made_from:
            return f"{event.get('type')}: {event.get('message')}"
    return None


def _pin_thread_stuck(record: HangRecord) -> bool:
    """The training process's pin-memory thread is stuck outside its queues: the batch the worker made is held there,
    which main-hang's `pin-thread` says, not lost on the way."""
    main = next((p for p in record.get("processes") or [] if p.get("role") == "main"), None)
    return main is not None and main_wait_cause(main).cause == "pin-thread"


BATCH_LOST_FIND = (
    "Find the worker's error on its stderr: a traceback from multiprocessing's queue thread (`Queue._feed`) or from "
    "`resource_sharer`. "
)


def _batch_lost(run: RunData, record: HangRecord, proc: dict[str, Any], row: list[Any]) -> Finding:
    loop = record.get("loop") or {}
    loader_id = loop.get("loader_id")
    task, made = row[0], row[3]
    thread, _ = _where(proc)
    ago = record["t"] - made
    slot = proc.get("inflight") or {}
    later = [r[0] for r in slot.get("recent") or [] if len(r) >= 4 and r[3] > made]
    title = (
        f"Loader {loader_id}'s batch {task} never reached the training loop: worker {proc.get('worker_id')} "
        f"(pid {proc.get('pid')}) made it {ago:.0f}s before and went on: batch-lost"
    )
    detail = (
        f"The training loop waited {record.get('waited_s') or 0:.0f}s for batch {task} of loader {loader_id}. Worker "
        f"{proc.get('worker_id')} finished it {ago:.0f}s before (collated and handed to its queue)"
        + (f" and has made {len(later)} batch(es) since" if later else "")
        + ": the batch was lost between the worker and the loop, so torch waits for it forever. A worker's queue "
        "pickles each batch in a background thread; where that fails (an object in the batch that does not pickle, "
        "a tensor whose file descriptor cannot be passed because the worker is at its open-file limit, /dev/shm "
        "full), the thread prints the error on the worker's stderr and drops the batch."
    )
    sent = _send_error(run, proc.get("pid"), task, row[1])
    if sent:
        title += f" ({sent})"
        detail += f" Here the worker's queue recorded why: `{sent}`."
    else:
        detail += " The worker's queue recorded no send error (the hook was not in place, or the batch went missing "
        "further on, in the pin-memory thread)."
    detail += _stack_note(record, proc)
    if record.get("on_hang") == "stop":
        detail += " dlprobe stopped the run (--on-hang stop)."
    cause = Cause("batch-lost", "idle: it made the awaited batch, which never arrived", "")
    evidence: Evidence = {**_evidence(record, proc, cause, thread), "batch": task, "made_s_before": round(ago, 1),
                "send_error": sent}  # fmt: skip
    # The slot's current fetch is whatever the worker did next (a stale one if that fetch raised): not the hang's.
    for key in _SLOT_KEYS:
        evidence.pop(key, None)
    fix = PICKLABLE_BATCH_FIX if sent else BATCH_LOST_FIND + PICKLABLE_BATCH_FIX
    return Finding("worker-hang", "error", title, detail, fix, evidence, loader_id)


def _stack_lines(thread: dict[str, Any] | None) -> list[str]:
    """The stuck thread's frames, the user's own frames first (innermost first), then the rest."""
    if thread is None:
        return []
    frames = own_frames(thread)
    mine = [frame_text(f) for f in frames if f.get("user")]
    rest = [frame_text(f) for f in frames if not f.get("user")]
    return (mine + rest)[:MAX_STACK_LINES]


def _stack_note(record: HangRecord, proc: dict[str, Any]) -> str:
    if proc.get("state") in STOPPED_STATES:
        return ""  # the cause says it is stopped and why it has no stack; there is no tool to blame
    problem = record.get("stack_problem") or {}
    why = {"missing": "py-spy is not installed", "permission": "py-spy was not allowed to attach"}.get(
        problem.get("kind", ""), "py-spy gave no stack"
    )
    advice = f" {problem['advice']}" if problem.get("advice") else ""
    if proc.get("stack_tool") == "faulthandler":
        return f" The stacks come from the process's own faulthandler (Python frames only) because {why}.{advice}"
    if not proc.get("stack"):
        return f" No stack could be taken ({proc.get('stack_error') or why}).{advice}"
    return ""


def _where(proc: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    thread = main_thread(proc.get("stack") or [])
    frame = innermost_user_frame(thread)
    return thread, (frame_text(frame) if frame else "")


# What the slot says of the worker's current fetch: the hang's where the worker is stuck in it, not where it is idle.
_SLOT_KEYS: tuple[Literal["index", "batch_indices", "position_in_batch", "phase", "stuck_s", "stuck_frame"], ...] = (
    "index", "batch_indices", "position_in_batch", "phase", "stuck_s", "stuck_frame",
)  # fmt: skip


def _evidence(record: HangRecord, proc: dict[str, Any], cause: Cause, thread: dict[str, Any] | None) -> Evidence:
    slot = proc.get("inflight") or {}
    frame = innermost_user_frame(thread)
    evidence: Evidence = {"pid": proc.get("pid")}
    if proc.get("tid"):  # a worker thread (worker_method="thread"): "pid" is its thread id, in this process
        evidence.update({"tid": proc["tid"], "process_pid": proc.get("process_pid")})
    evidence.update(
        {
            "worker_id": proc.get("worker_id"),
            "cause": cause.cause,
            "index": slot.get("index"),
            "batch_indices": slot.get("indices"),
            "position_in_batch": slot.get("pos"),
            "phase": slot.get("phase"),
            "index_kind": slot.get("kind"),
            "stuck_s": _age(slot, record["t"]) if slot else None,
            "waited_s": record.get("waited_s"),
            "stuck_frame": frame_text(frame) if frame else None,
            "user_frames": [frame_text(f) for f in user_frames(thread)][:MAX_STACK_LINES],
        }
    )
    evidence.update(as_evidence({k: v for k, v in cause.evidence.items() if v is not None}))
    evidence.update(
        {
            "stack_tool": proc.get("stack_tool"),
            "stack": _stack_lines(thread),
            "hang_record": hang_record_ref(record["number"]),
        }
    )
    return evidence


def _worker_hang(run: RunData, record: HangRecord, stuck: list[dict[str, Any]]) -> Finding:
    loop = record.get("loop") or {}
    loader_id = loop.get("loader_id")
    lo = run.loader(loader_id) if loader_id is not None else None
    start_method = lo.start_method if lo else None
    proc = stuck[0]
    cause = classify(proc, _fork_threads(run, loader_id), start_method)
    thread, where = _where(proc)
    slot = proc.get("inflight") or {}
    index = slot.get("index")
    what = "stream position" if slot.get("kind") == "iterable" else "index"
    who = f"thread {proc['tid']} of pid {proc.get('process_pid')}" if proc.get("tid") else f"pid {proc.get('pid')}"
    title = (
        f"Loader {loader_id} worker {proc.get('worker_id')} ({who}) hangs on {what} {index}"
        + (f" in {where.split('  `')[0]}" if where else "")
        + f": {cause.cause}"
    )
    waited = record.get("waited_s")
    detail = (
        f"The training loop waited {waited:.0f}s for batch {loop.get('awaited_task')} of loader {loader_id}, "
        f"which worker {proc.get('worker_id')} is still making ({slot.get('phase')} of {what} {index}, "
        f"position {slot.get('pos')} in the batch {indices_text(slot.get('indices'))}). The worker is {cause.summary}."
    )
    if len(stuck) > 1:
        detail += f" {len(stuck) - 1} more worker(s) are stuck the same way (see evidence)."
    detail += _stack_note(record, proc)
    if record.get("on_hang") == "stop":
        detail += " dlprobe stopped the run (--on-hang stop)."
    evidence: Evidence = _evidence(record, proc, cause, thread)
    if len(stuck) > 1:
        evidence["also_stuck"] = [
            {"pid": p.get("pid"), "worker_id": p.get("worker_id"), "index": (p.get("inflight") or {}).get("index")}
            for p in stuck[1:]
        ]
    fix = cause.fix
    if cause.cause == "fork-lock" and lo is not None and (methods := other_methods(run, lo)) != OTHER_METHODS:
        fix = fix.replace(FORK_LOCK_OTHER_METHODS, f"or {methods}")  # the run showed they would fail as it is
    return Finding("worker-hang", "error", title, detail, fix, evidence, loader_id)


def _still_starting(workers: list[dict[str, Any]]) -> bool:
    """No worker has reached torch's worker loop yet: none has an in-flight record (it is made as the loop calls
    worker_init_fn) and each one's stack, where there is one, has no `_worker_loop` frame. A spawn or forkserver
    worker on a busy machine can take longer than --hang-timeout to import torch and unpickle the dataset."""
    return bool(workers) and all(
        not p.get("inflight")
        and p.get("stack")
        and not any(f.get("name") == "_worker_loop" for t in p["stack"] for f in t.get("frames") or [])
        for p in workers
    )


STARTING = Cause(
    "workers-starting",
    "waiting for its first batch while no worker has started yet: each worker is still starting up (under spawn or "
    "forkserver a worker is a new Python that imports torch and the script's modules and unpickles the dataset "
    "before its first sample)",
    "If start-up is this slow, give --hang-timeout more than it takes; keep the dataset cheap to pickle (large data "
    "in files or shared memory, file handles opened in worker_init_fn) and use DataLoader(..., "
    "persistent_workers=True) so workers start once, not every epoch.",
)


def _main_hang(run: RunData, record: HangRecord) -> Finding | None:
    main = next((p for p in record.get("processes") or [] if p.get("role") == "main"), None)
    if main is None:
        return None
    loop = record.get("loop") or {}
    loader_id = loop.get("loader_id")
    slot = main.get("inflight") or {}
    fetching = slot.get("phase") in BUSY_PHASES
    workers = [p for p in record.get("processes") or [] if p.get("role") == "worker"]
    if fetching:
        cause = classify(main, None, None)
    elif _still_starting(workers):
        cause = STARTING  # not a batch lost: the wait ran out before any worker began (a start-up this slow)
    else:
        cause = main_wait_cause(main)
    thread, where = _where(main)
    state = loop.get("state")
    doing = (
        "creating the loader's iterator (starting workers)" if state == "creating-iterator" else "waiting for a batch"
    )
    title = f"The training process (pid {main.get('pid')}) is stuck {doing} of loader {loader_id}"
    if fetching:
        title += f", in {slot.get('phase')} of index {slot.get('index')}"
    title += f": {cause.cause}"
    idle = [p for p in workers if (p.get("inflight") or {}).get("phase") not in BUSY_PHASES]
    if cause is STARTING:
        context = f"No batch for {record.get('waited_s', 0):.0f}s while none of the {len(workers)} workers has started."
    elif workers:
        context = f"No batch for {record.get('waited_s', 0):.0f}s while {len(idle)} of {len(workers)} workers are idle."
    else:
        context = f"No batch for {record.get('waited_s', 0):.0f}s; the loader has no workers, so the training "
        context += "process fetches and collates the samples itself."
    detail = (
        f"{context} The training process is {cause.summary}"
        + (f", at {where}" if where else "")
        + "."
        + _stack_note(record, main)
    )
    if record.get("on_hang") == "stop":
        detail += " dlprobe stopped the run (--on-hang stop)."
    return Finding("main-hang", "error", title, detail, cause.fix, _evidence(record, main, cause, thread), loader_id)


def _main_stopped(record: HangRecord) -> bool:
    """The stalled training process was stopped (SIGSTOP, Ctrl-Z, a debugger) when the hang was recorded."""
    main = next((p for p in record.get("processes") or [] if p.get("role") == "main"), None)
    return main is not None and main.get("state") in STOPPED_STATES


def _recovered(run: RunData, record: HangRecord) -> bool:
    """A batch of the same loader arrived after the dump: it was a stall, not a hang (--on-hang wait)."""
    loader_id = (record.get("loop") or {}).get("loader_id")
    return any(
        e.get("ev") == EV_BATCHES and e.get("loader") == loader_id and e.get("t", 0) > record["t"] for e in run.events
    )


def find_hangs(run: RunData) -> list[Finding]:
    findings = []
    for record in run.hangs:
        loop = record.get("loop") or {}
        lost = _lost_batch(run, record) if not _pin_thread_stuck(record) else None
        stuck = _stuck_workers(record, loop.get("loader_id"))
        if _main_stopped(record):
            # a stopped loop takes no batch: the ones its workers made wait in the queue, lost to nothing
            finding: Finding | None = _main_hang(run, record)
        elif lost is not None:
            finding = _batch_lost(run, record, *lost)
        else:
            finding = _worker_hang(run, record, stuck) if stuck else _main_hang(run, record)
        if finding is None:
            continue
        if _recovered(run, record):
            finding.severity = "warning"
            finding.title = f"(recovered later) {finding.title}"
            finding.detail += " Batches arrived again later, so this was a long stall rather than a hang."
        findings.append(finding)
    return findings
