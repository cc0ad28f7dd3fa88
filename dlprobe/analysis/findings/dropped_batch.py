"""batch-dropped: batches a worker made and its queue could not send to the training loop.

A worker's multiprocessing queue pickles each batch in a background thread; where that fails (an h5py handle or an
open file in the batch, a tensor whose descriptor cannot be duplicated at the worker's open-file limit) CPython prints
the error on the worker's stderr and drops the batch. torch then waits for it forever, or raises "DataLoader timed
out" under DataLoader(timeout=...). The workers record each such drop (in_training/send_errors.py): this names it,
before the hang or the timeout it leads to."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.findings.common import PICKLABLE_BATCH_FIX, SHM_SPACE_FIX, same_loader
from dlprobe.analysis.measures.batch_sent import VIEWS_FIX, loader_views, views_text
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import EV_BATCH_SEND_ERROR
from dlprobe.torch_text import EMFILE, SHM_FULL

BATCHES_SHOWN = 8
# The fix for a batch its queue could not pickle (the hang finding of the same batch gives it too).
DESCRIPTORS_FIX = (
    "The worker was out of file descriptors when it shared the batch's tensors: close what `__getitem__` (or the code "
    "it calls) opens (see fd-leak), and give DataLoader(timeout=...) so a batch that never comes raises instead of "
    "hanging."
)


def _error_text(event: dict[str, Any]) -> str:
    return f"{event.get('type')}: {event.get('message')}"


def find_dropped_batches(run: RunData) -> list[Finding]:
    """One finding per loader whose workers' queues dropped batches, led by the first error."""
    by_loader: dict[int | None, list[dict[str, Any]]] = {}
    for event in run.events:
        if event.get("ev") == EV_BATCH_SEND_ERROR and isinstance(event.get("task"), int):
            by_loader.setdefault(event.get("loader"), []).append(event)
    findings = []
    for loader_id, events in by_loader.items():
        events.sort(key=lambda e: e.get("t") or 0.0)
        first = events[0]
        error = _error_text(first)
        batches = sorted({e["task"] for e in events if isinstance(e.get("task"), int)})
        workers = sorted({e["worker_id"] for e in events if isinstance(e.get("worker_id"), int)})
        pids = sorted({e["pid"] for e in events if isinstance(e.get("pid"), int)})
        others = sorted({_error_text(e) for e in events} - {error})
        count = len(events)
        shown = ", ".join(str(b) for b in batches[:BATCHES_SHOWN]) + (", ..." if len(batches) > BATCHES_SHOWN else "")
        title = (
            f"Loader {loader_id}'s workers could not send {count} batch{'es' if count > 1 else ''} to the training "
            f"loop ({error})"
            + (f": batch {shown} dropped" if len(batches) == 1 else f": batches {shown} dropped" if batches else "")
        )
        detail = (
            f"Worker{'s' if len(workers) > 1 else ''} {', '.join(str(w) for w in workers)} (pid "
            f"{', '.join(str(p) for p in pids)}) made {'these batches' if count > 1 else 'this batch'}, and the queue "
            "that carries a batch to the training loop failed to pickle "
            f"{'them' if count > 1 else 'it'} in its background thread: CPython printed the error on the worker's "
            "stderr and dropped the batch. The loop waits for a dropped batch forever (torch keeps batches in order), "
            "or raises `DataLoader timed out` where DataLoader(timeout=...) is set."
            + (f" Other errors too: {'; '.join(others[:3])}." if others else "")
        )
        out_of_descriptors = bool(EMFILE.search(error))
        evidence: Evidence = {"error": error, "batch_numbers": batches[:50], "count": count, "worker_ids": workers,
                    "pids": pids, "other_errors": others[:5]}  # fmt: skip
        fix = DESCRIPTORS_FIX if out_of_descriptors else PICKLABLE_BATCH_FIX
        if SHM_FULL.search(error):  # /dev/shm had no room for the batch: nothing in it was unpicklable
            lo = next((lo for lo in run.loaders if lo.loader_id == loader_id), None)
            sent = loader_views(run, lo) if lo is not None else None
            evidence.update({"cause": "views" if sent else "shm-full", "batch_bytes": sent.own if sent else None,
                             "sent_bytes": sent.sent if sent else None})  # fmt: skip
            if sent:
                title += f"; its {views_text(sent)}"
                detail += (
                    f" /dev/shm had no room for them: the {views_text(sent)}, so the batches in flight take "
                    f"{sent.ratio:.0f} times the room their own bytes need. Ruled out: an unpicklable batch (the "
                    "error is the shared memory's, not pickle's)."
                )
                fix = f"{VIEWS_FIX} Otherwise: {SHM_SPACE_FIX[0].lower()}{SHM_SPACE_FIX[1:]}"
            else:
                detail += " /dev/shm had no room for them: the error is the shared memory's, not pickle's."
                fix = SHM_SPACE_FIX
        findings.append(Finding("batch-dropped", "error", title, detail, fix, evidence, loader_id))
    return findings


def explains(cause: Finding, symptom: Finding) -> str | None:
    """A batch the worker's queue dropped is the batch the loop then waits for (a hang), or times out on."""
    if cause.code != "batch-dropped" or not same_loader(cause, symptom):
        return None
    if symptom.code == "worker-hang" and symptom.evidence.get("cause") == "batch-lost":
        batch = symptom.evidence.get("batch")
        if batch in (cause.evidence.get("batch_numbers") or []) or symptom.evidence.get("pid") in (
            cause.evidence.get("pids") or []
        ):
            return f"the hang waiting for batch {batch} (worker-hang)"
    if symptom.code == "script-error" and "DataLoader timed out" in str(symptom.evidence.get("message") or ""):
        return "the script's DataLoader timeout (script-error)"
    return None
