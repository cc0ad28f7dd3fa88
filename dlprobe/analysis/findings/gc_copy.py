"""gc-copy: each forked worker's first full garbage collection copied the pages of the objects it inherited.

The mechanism is timed, not guessed: the worker's full collection (in_training/worker_gc.py) ran inside the rise
of its memory, the rise is at least STEP_FACTOR times what the worker's other intervals grew at, the readings next
to it do not go on rising (a dataset's own copy-on-access growth would) and half of it is Private_Dirty. It is
memory once per worker, not growth: `dlprobe check` sets it apart from the steady growth it compares.
"""

from __future__ import annotations

from typing import Any, cast

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.memory import GcCopyRow
from dlprobe.analysis.measures.worker_steps import worker_steps
from dlprobe.analysis.run.model import RunData
from dlprobe.loader_model.worker_memory import FULL_COLLECTION
from dlprobe.units import format_bytes

# The copies count from here in all (the loader's workers together): below it gc.freeze() buys too little to advise.
GC_COPY_MIN_TOTAL = 32 << 20


def _copies(run: RunData, loader_id: int) -> list[dict[str, Any]]:
    """Each worker of the loader whose memory stepped at a timed full collection: its worker id, pid, bytes, when."""
    started = float(run.meta.get("started_at") or 0.0)
    rows = []
    for proc in run.processes:
        if proc.role != "worker" or proc.loader_id != loader_id:
            continue
        found = worker_steps(run, proc)
        for step in found.steps if found else []:
            if step.cause != FULL_COLLECTION:
                continue
            inside = [c for c in proc.full_collections if c[1] >= step.t_before and c[0] < step.t]
            rows.append({
                "worker_id": proc.worker_id, "pid": proc.pid, "bytes": step.bytes,
                "between_s": [round(step.t_before - started, 2), round(step.t - started, 2)],
                "collection_s": round(inside[0][1] - inside[0][0], 3) if inside else None,
            })  # fmt: skip
    return sorted(rows, key=lambda r: (r["worker_id"] is None, r["worker_id"] or 0, r["between_s"]))


def find_gc_copy(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        # gc.freeze() in the training process only reaches workers forked from it (forkserver and spawn workers
        # inherit nothing of its heap); and where it was already frozen, or the collector off, the advice is moot
        gc_state = loader.gc_at_fork or {}
        if loader.num_workers == 0 or loader.start_method != "fork" or gc_state.get("frozen"):
            continue
        rows = _copies(run, loader.loader_id)
        total = sum(r["bytes"] for r in rows)
        if not rows or total < GC_COPY_MIN_TOTAL:
            continue
        workers = len({r["pid"] for r in rows})
        largest = max(r["bytes"] for r in rows)
        blocks = gc_state.get("blocks")
        held = f" (~{blocks:,} Python allocations at fork)" if isinstance(blocks, int) and blocks else ""
        first = rows[0]
        timed = f", {first['collection_s']:.2f} s long" if first.get("collection_s") is not None else ""
        findings.append(
            Finding(
                code="gc-copy",
                severity="info",
                title=(
                    f"Loader {loader.loader_id}: {workers} worker(s) each copied up to {format_bytes(largest)} of "
                    f"the training process's objects at their first full garbage collection, "
                    f"{format_bytes(total)} in all, once"
                ),
                detail=(
                    "CPython's collector writes to a header inside every object it tracks, so a forked worker's first "
                    f"full collection touches every object it inherited{held} and the kernel copies each page holding "
                    f"one, though the worker never reads them. Timed in the workers: worker {first['worker_id']}'s "
                    f"full collection{timed} ran while its memory rose by {format_bytes(first['bytes'])}, at least 4 "
                    f"times its steady rate and mostly private dirty pages (between the readings at "
                    f"{first['between_s'][0]:.1f} s and {first['between_s'][1]:.1f} s), and the readings around it "
                    "stayed flat. This is memory once per worker, not growth: `dlprobe check` "
                    "compares the growth with these steps set apart."
                ),
                fix=(
                    "Call gc.freeze() just before the loop starts the workers (after building the dataset, before "
                    "`for batch in loader`; each epoch again unless persistent_workers=True): the workers' collector "
                    f"then skips what they inherited, saving about {format_bytes(total)}. Objects frozen are kept "
                    "for the process's life; it does not stop the copies that reading Python objects makes "
                    "(reference counts)."
                ),
                evidence={
                    "gc_steps": cast("list[GcCopyRow]", rows),
                    "total_bytes": total,
                    "largest_bytes": largest,
                    "start_method": loader.start_method,
                    "gc_at_fork": loader.gc_at_fork,
                },
                loader_id=loader.loader_id,
            )
        )
    return findings
