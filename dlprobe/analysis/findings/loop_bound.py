"""loop-bound: the training loop's own step, not the DataLoader, sets the pace, and the workers beyond those that
keep it fed hold memory for no speed."""

from __future__ import annotations

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.loop_timing import loop_timing
from dlprobe.analysis.measures.stats import metric_summary
from dlprobe.analysis.measures.timed_batches import timed_batches
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.loader_model.limits import HEADROOM
from dlprobe.loader_model.rate import workers_to_feed
from dlprobe.units import format_bytes

# The loop waits for data under this share of its steady time: not input-bound (the TensorFlow profiler's lower band).
LOOP_BOUND_WAIT = 0.05
MIN_STEADY_BATCHES = 20  # steady batches before the loop's pace says anything
MIN_SPAN_S = 0.5
MIN_TIMED_BUILDS = 10  # batches the workers timed themselves past each one's first
SURPLUS_WORKERS = 2  # workers beyond those needed before it is said...
SURPLUS_BYTES = 512 * 2**20  # ...and the private memory they hold together


def find_loop_bound(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    if run.ended_in_error:  # as input-bound: no worker count advised from a failing run
        return findings
    for loader in run.loaders:
        finding = _loop_bound(run, loader)
        if finding is not None:
            findings.append(finding)
    return findings


def _loop_bound(run: RunData, loader: LoaderRecord) -> Finding | None:
    nw = loader.num_workers_setting
    if not nw or nw < 1 + SURPLUS_WORKERS or loader.thread_workers:
        return None
    timing = loop_timing(loader)
    if timing is None or timing.batches < MIN_STEADY_BATCHES or timing.span_s < MIN_SPAN_S or timing.step_s <= 0:
        return None
    started = _waits_started(loader, nw)
    if started is None:
        return None
    mean_wait = sum(w for w, _ in started) / len(started)
    mean_handover = sum(h for _, h in started) / len(started)
    # What more workers could shorten is the wait for a worker's batch; taking it off the queue (the hand-over) is
    # the main process's own work whatever the count. Under load a run waited 8%, 7 points of them in the hand-over.
    wait_share = (mean_wait - mean_handover) / (mean_wait + timing.step_s)
    if wait_share >= LOOP_BOUND_WAIT:
        return None
    build_s = _build_seconds(run, loader.loader_id)
    if build_s is None:
        return None  # the workers' own timing is missing: how many keep up is not known, so nothing is advised
    needed = workers_to_feed(build_s, timing.step_s)
    peaks = [p for p in (metric_summary(w.series, "uss")["peak"] for w in run.workers(loader.loader_id)) if p]
    if nw - needed < SURPLUS_WORKERS or not peaks:
        return None
    per_worker = sum(peaks) // len(peaks)
    surplus = (nw - needed) * per_worker
    if surplus < SURPLUS_BYTES:
        return None
    evidence: Evidence = {
        "wait_share": round(wait_share, 4),
        "mean_wait_s": round(mean_wait, 5),
        "handover_ms_per_batch": round(1000 * mean_handover, 3),
        "step_s": round(timing.step_s, 5),
        "steady_batches": timing.batches,
        "batch_build_s": round(build_s, 5),
        "num_workers": nw,
        "suggested_num_workers": needed,
        "surplus_workers": nw - needed,
        "worker_uss_mean_bytes": per_worker,
        "surplus_bytes": surplus,
    }
    return Finding(
        code="loop-bound",
        severity="info",
        title=f"Loader {loader.loader_id} keeps ahead of the training loop: {nw - needed} of its {nw} workers hold "
        f"{format_bytes(surplus)} for no speed",
        detail=f"The loop waited for the workers {100 * wait_share:.1f}% of its time once every worker had started "
        f"({1000 * (mean_wait - mean_handover):.2f} ms a batch, and {1000 * mean_handover:.2f} ms taking it off the "
        f"queue, which no number of workers shortens, against {1000 * timing.step_s:.1f} ms of its own step): the "
        f"training step, not the workers, sets the pace. A worker builds a batch in {1000 * build_s:.1f} ms (its "
        f"own timing, fetch and collate), so {needed} worker(s) deliver at least {HEADROOM:g}x the batches the loop "
        f"takes; the other {nw - needed} wait for their next index, each holding {format_bytes(per_worker)} of private "
        "memory (USS).",
        fix=f"DataLoader(..., num_workers={needed}) keeps the loop fed and frees about {format_bytes(surplus)}; "
        "`dlprobe tune` measures it with the loop's step timed. Keep more only where the loader's speed varies "
        "(a shared file system on a busy day).",
        evidence=evidence,
        loader_id=loader.loader_id,
    )


def _waits_started(loader: LoaderRecord, nw: int) -> list[tuple[float, float]] | None:
    """The loop's waits for data once the workers have started, each with the part of it the main process spent
    taking the batch off the queue (0 where that was not timed): each epoch's batches after its first nw (each
    worker's first, with its start-up and worker_init_fn in it: 8 workers each loading a table read as a 16% wait in
    a 2 s run that waited 2% after them); None under MIN_STEADY_BATCHES."""
    out: list[tuple[float, float]] = []
    for epoch in loader.epochs:
        handovers = epoch.handovers if epoch.handovers and len(epoch.handovers) == len(epoch.waits) else None
        out += [(w, min(w, handovers[i]) if handovers else 0.0) for i, w in enumerate(epoch.waits) if i >= nw]
    return out if len(out) >= MIN_STEADY_BATCHES else None


def _build_seconds(run: RunData, loader_id: int) -> float | None:
    """A worker's mean wall time building one batch, from the batches the workers timed themselves, each worker's
    first left out (its start-up); None under MIN_TIMED_BUILDS."""
    seen: set[int] = set()
    total = weight = 0.0
    for row in timed_batches(run, loader_id):
        if row.writer not in seen:
            seen.add(row.writer)
            continue
        total += row.build_s * row.stride  # a row kept at stride k stands for k batches
        weight += row.stride
    return total / weight if weight >= MIN_TIMED_BUILDS else None
