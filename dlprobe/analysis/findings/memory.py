"""Worker memory findings: copy-on-write and new allocations under fork, mapped files, and spawn copies."""

from __future__ import annotations

from typing import Any, cast

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.memory import BatchViews, GrowingAttribute
from dlprobe.analysis.evidence.rows import WorkerRow
from dlprobe.analysis.evidence.schema import Evidence, as_evidence
from dlprobe.analysis.findings.common import same_loader, worker_name
from dlprobe.analysis.findings.remedies import frame_columns_text, imports_text, remedy_code
from dlprobe.analysis.measures.attr_growth import grown_attributes, growth_fix, growth_text, watched_workers
from dlprobe.analysis.measures.batch_sent import VIEWS_FIX, SentBytes, loader_views, views_text
from dlprobe.analysis.measures.worker_growth import (
    epoch_fraction,
    memory_limit,
    row_growth,
    same_load,
    worker_growth_rows,
    world_size,
)
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.analysis.run.teardown import teardown_evidence, teardown_note
from dlprobe.units import MiB, format_bytes

# cow-growth is judged by what the copies cost the job: every worker's (and in a job every rank's) copies together,
# projected to the end of the epoch, against the tightest memory limit and against the parent's own size.
COW_WORKER_FLOOR = 16 * MiB  # a worker's copies count from here: its start-up (first batches, hooks) copies ~2 MiB
# With no Python-object dataset to blame (no suspect attribute), a worker's first full garbage collection writes to
# every object the parent holds, ~35 MiB per worker for a torch + numpy parent (measured): only more counts.
COW_HEAP_WALK_FLOOR = 64 * MiB
COW_LIMIT_SHARE = 0.05  # the copies take this share of the tightest memory limit: memory the job cannot use
COW_PARENT_SHARE = 0.25  # or they hold a quarter of the parent's own memory once more
COW_RSS_SHARE = 0.5  # RSS growing less than half as fast as USS means pages went shared -> private
# Which story a cow-growth finding tells (its evidence "variant"): the job report words its merged title by it.
COW_COPIED = "copied"  # the parent's pages copied into each worker
COW_LOADED_AT_START = "loaded_at_start"  # each worker read the same data into its own memory once
COW_ALLOCATING = "allocating"  # the workers keep allocating new memory
MAPPED_MIN_GROWTH = 64 * MiB  # file-backed + tmpfs pages worth a sentence (never an alarm)

COW_FIXES = (
    "Keep the data out of Python objects so reading it touches no reference counts: "
    "numpy arrays of fixed-width bytes or numbers (np.array(paths, dtype='S')), a pyarrow table, "
    "one serialized buffer plus offsets, or torch tensors."
)
MAPPED_NOTE = (
    "File-backed and /dev/shm (tmpfs) pages are shared with every process that maps the same file, and file pages "
    "are page cache the kernel reclaims under pressure; USS counts them while only one worker has touched them, so "
    "they are shown here but never raise an alarm on their own."
)


SUSPECTS_FIXED = 3  # the largest suspects each given their remedy in cow-growth's fix (a dict and its key list)


def _suspects_fix(suspects: list[dict[str, Any]]) -> str:
    if not suspects:
        return COW_FIXES
    top = suspects[0]
    text = (
        f"`{top['attribute']}` is a {top['type']} with {top['items']:,} items "
        f"(~{format_bytes(top['est_bytes'])} of Python objects); every worker that reads it copies the pages. "
    ) + frame_columns_text(top)
    others = suspects[1:SUSPECTS_FIXED]
    if others:
        text += (
            "So do "
            + ", ".join(
                f"`{s['attribute']}` ({s['type']}, {s['items']:,} items, ~{format_bytes(s['est_bytes'])})"
                for s in others
            )
            + ". "
        )
    fixes = [(s, code) for s in suspects[:SUSPECTS_FIXED] if (code := remedy_code(s))]
    if not fixes:
        return text + COW_FIXES
    lines = "; ".join(f"`{code}`" for _, (code, _) in fixes)
    numpy = any("np.asarray" in code for _, (code, _) in fixes)
    reads = "lookups by key and indexing return" if any(n == "PackedMapping" for _, (_, n) in fixes) else (
        "indexing returns")  # fmt: skip
    imports = imports_text([name for _, (_, name) in fixes], numpy)
    return text + (
        f"Hold {'them in buffers' if len(fixes) > 1 else 'it in a buffer'} that workers read without copying: {lines} "
        f"({imports + '; ' if imports else ''}{reads} the same values). "
        "Or keep the data out of Python objects another way: numpy arrays of fixed-width bytes or numbers, a pyarrow "
        "table, or tensors."
    )


def _gc_fix(gc_state: dict[str, Any] | None) -> str:
    """gc.freeze() advice, unless the parent's objects were already out of the collector's reach."""
    state = gc_state or {}
    if state.get("frozen"):
        return (
            f"gc.freeze() was already called ({state['frozen']:,} objects frozen at fork), so the copies come from "
            "reference counts of the objects the workers read, not from the garbage collector. "
        )
    if state.get("enabled") is False:
        return ""
    held = f" (~{state['blocks']:,} Python allocations at fork)" if state.get("blocks") else ""
    return (
        "Call gc.freeze() just before the loader starts its workers (after building the dataset, before "
        "`for batch in loader`): each worker's garbage collector otherwise writes to the header of every object "
        f"the parent held{held}, copying pages the worker never reads. It does not stop reference-count writes. "
    )


SUSPECTS_LEAD_SHARE = 0.33  # suspects explaining this share of the copies lead the fix, gc.freeze() after them


def _cow_fix(suspects: list[dict[str, Any]], cow: int, gc_state: dict[str, Any] | None) -> str:
    explained = sum(int(s.get("est_bytes") or 0) for s in suspects)
    if suspects and cow <= explained:
        return _suspects_fix(suspects)
    if suspects and explained >= cow * SUSPECTS_LEAD_SHARE:  # the data the workers read first, the heap walk second
        return _suspects_fix(suspects) + " " + _gc_fix(gc_state).strip()
    return _gc_fix(gc_state) + _suspects_fix(suspects)


def _parent_bytes(run: RunData) -> int | None:
    """The parent's (the training process's) own memory at its peak: USS, before its workers shared its pages."""
    main = next((p for p in run.processes if p.role == "main"), None)
    readings = [v for _, v in main.series.values("uss")] if main else []
    return max(readings) if readings else None


def _cost(run: RunData, loader: LoaderRecord, rows: list[dict[str, Any]], peer_bytes: int = 0) -> dict[str, Any] | None:
    """What the workers' copies cost, if it is worth a finding: each worker past its floor counts, their total is
    projected to the end of the epoch (a worker copies at most the parent's size) and, with the other ranks' copies
    on this node, weighed against the tightest memory limit and the parent's own size ("worth": over either).
    None when no worker passed its floor."""
    floor = COW_WORKER_FLOOR if loader.dataset.get("suspects") else COW_HEAP_WALK_FLOOR
    for r in rows:
        r["counted"] = row_growth(r) >= floor
    counted = [r for r in rows if r["counted"]]
    if not counted:
        return None
    parent = _parent_bytes(run)
    limit = memory_limit(run)
    fraction = epoch_fraction(loader, world_size(run))
    total = sum(row_growth(r) for r in counted)
    # Each worker's growth by kind of page, bent toward its ceiling (loader_model.memory_growth), never below what
    # it already grew: a load at start is held, not extended over the epoch.
    projected = sum(max(row_growth(r), r["projection"]["projected_bytes"]) for r in counted)
    low = sum(max(row_growth(r), r["projection"]["projected_low_bytes"]) for r in counted)
    high = sum(max(row_growth(r), r["projection"]["projected_high_bytes"]) for r in counted)
    copies = [r["projection"]["copies"] for r in counted if r["projection"]["copies"]]
    ceiling = max(copies, key=lambda c: c["ceiling_bytes"] or 0) if copies else None
    parts = [*copies, *(r["projection"]["allocations"] for r in counted)]
    judged = int(max(total, projected)) + peer_bytes
    over_limit = limit is not None and judged >= COW_LIMIT_SHARE * limit[0]
    over_parent = parent is not None and judged >= COW_PARENT_SHARE * parent
    return {
        "worth": over_limit or over_parent,
        "counted_workers": len(counted),
        "worker_floor_bytes": floor,
        "total_bytes": total,
        "epoch_fraction": round(fraction, 3),
        "projected_total_bytes": int(projected),
        "projected_low_total_bytes": int(low),
        "projected_high_total_bytes": int(high),
        "measured_at_epoch_fraction": min(p["measured_at_epoch_fraction"] for p in parts),
        "copies_ceiling_bytes": ceiling["ceiling_bytes"] if ceiling else None,
        "copies_ceiling_source": ceiling["ceiling_source"] if ceiling else None,
        "other_ranks_bytes": peer_bytes,
        "limit_bytes": limit[0] if limit else None,
        "limit_kind": limit[1] if limit else None,
        "parent_bytes": parent,
    }


def cow_total(run: RunData) -> int:
    """Every loader's counted copies, projected to the epoch's end: what this rank adds to its node's total."""
    total = 0
    for loader in run.loaders:
        if loader.num_workers and loader.start_method in ("fork", None):
            cost = _cost(run, loader, worker_growth_rows(run, loader))
            total += cost["projected_total_bytes"] if cost else 0
    return total


def _cost_evidence(cost: dict[str, Any]) -> Evidence:
    return as_evidence({k: v for k, v in cost.items() if k != "worth"})


def _cost_text(cost: dict[str, Any]) -> str:
    """ "218 MiB in all, 45% of the parent's 483 MiB" and, where the epoch is still running, its projection."""
    total, projected = cost["total_bytes"], cost["projected_total_bytes"]
    text = f"{format_bytes(total)} in all"
    if projected > 1.1 * total:
        low, high = cost["projected_low_total_bytes"], cost["projected_high_total_bytes"]
        spread = f" ({format_bytes(low)}-{format_bytes(high)})" if high - low >= 0.05 * projected else ""
        text += f", {format_bytes(projected)}{spread} by the end of the epoch"
    if cost["other_ranks_bytes"]:
        text += f", {format_bytes(projected + cost['other_ranks_bytes'])} with the other ranks on this node"
    judged = max(total, projected) + cost["other_ranks_bytes"]
    shares = []
    if cost["parent_bytes"]:
        shares.append(
            f"{100 * judged / cost['parent_bytes']:.0f}% of the parent's {format_bytes(cost['parent_bytes'])}"
        )
    if cost["limit_bytes"]:
        shares.append(f"{100 * judged / cost['limit_bytes']:.0f}% of the {format_bytes(cost['limit_bytes'])} "
                      f"{cost['limit_kind']}")  # fmt: skip
    return text + (" (" + ", ".join(shares) + ")" if shares else "")


def _projection_note(cost: dict[str, Any]) -> str:
    """How the projection was made, for the detail: where in the epoch, the ceiling that bounded it."""
    if cost["measured_at_epoch_fraction"] >= 1:  # every worker's epoch ended: measured, not projected
        return ""
    low, high = cost["projected_low_total_bytes"], cost["projected_high_total_bytes"]
    text = (
        f" Projected from {100 * cost['measured_at_epoch_fraction']:.0f}% of the epoch to "
        f"{format_bytes(cost['projected_total_bytes'])} ({format_bytes(low)}-{format_bytes(high)}): each worker's "
        "growth after its start is fitted by a curve that bends as fewer new pages are left to copy (the range: every "
        "curve the readings allow)"
    )
    if cost["copies_ceiling_bytes"]:
        text += (f", and no worker's copies can pass {cost['copies_ceiling_source']} "
                 f"({format_bytes(cost['copies_ceiling_bytes'])})")  # fmt: skip
    return text + "."


def _severity(rows: list[dict[str, Any]], cost: dict[str, Any]) -> str:
    total_uss = sum(r["uss_peak_bytes"] or 0 for r in rows) + cost["other_ranks_bytes"]
    limit = cost["limit_bytes"]
    return "error" if limit and total_uss > 0.5 * limit else "warning"


def _evidence(loader: LoaderRecord, rows: list[dict[str, Any]]) -> Evidence:
    suspects = loader.dataset.get("suspects") or []
    return {
        "workers": cast("list[WorkerRow]", rows),
        "suspects": suspects,
        "start_method": loader.start_method or "fork",
        "num_workers": loader.num_workers,
        "projected_per_worker_bytes": sum(s["est_bytes"] for s in suspects) or None,
        "gc_at_fork": loader.gc_at_fork,
    }


def _grown_title(grown: list[dict[str, Any]]) -> str:
    """ " (`self.cache` grows in each)" for the title of the allocation story, where an attribute grew."""
    if not grown:
        return ""
    top = grown[0]
    where = "each" if top["grown_workers"] == top["workers"] else f"{top['grown_workers']} of {top['workers']}"
    return f" (`{top['attribute']}` grows in {where})"


def _grown_detail(grown: list[dict[str, Any]]) -> str:
    """The attributes that grew, counted in each worker (attr_growth), as sentences for the detail; "" for none."""
    text = growth_text(grown)
    return " Counted in each worker: " + text if text else ""


def _views_detail(run: RunData, loader: LoaderRecord, views: SentBytes) -> str:
    """The views as the allocation's candidate cause: what this run showed for it and against the other one."""
    watched = watched_workers(run, loader)
    against = (
        f" No attribute of the dataset grew in the {watched} worker(s) whose attributes were read, so no cache or "
        "list kept on the dataset explains it."
        if watched
        else " The dataset's attributes were not read in its workers, so state kept on the dataset is not ruled out."
    )
    return (
        f" Loader {loader.loader_id}'s {views_text(views)}: each sample keeps the whole tensor it was cut from alive "
        "until its batch is shared, and sharing copies all of it into /dev/shm, so the workers allocate and hand "
        f"over {views.ratio:,.0f}x what the batches hold." + against + " Returning copies from `__getitem__` tells "
        "the two apart: growth that goes with the views was theirs."
    )


def _views_fix(other: str) -> str:
    return f"{VIEWS_FIX} If the growth stays with copies: {other[0].lower()}{other[1:]}"


def _views_evidence(views: SentBytes) -> dict[str, Any]:
    return {"batch_bytes": views.own, "sent_bytes": views.sent, "storage_ratio": round(views.ratio, 1)}


def _allocating(
    run: RunData,
    loader: LoaderRecord,
    grown_attrs: list[dict[str, Any]],
    evidence: Evidence,
    words: tuple[str, str, str],
) -> tuple[str, str, str]:
    """The allocation story, told alike by the readings by kind and by USS alone: the attribute that grew where one
    did, else the batches' views where they are views; (title, detail, fix) with it, the evidence marked."""
    title, detail, fix = words
    evidence["variant"] = COW_ALLOCATING
    if grown_attrs:
        evidence["growing_attributes"] = cast("list[GrowingAttribute]", grown_attrs)
    elif (views := loader_views(run, loader)) is not None:
        title += f"; its {views_text(views)}"
        detail += _views_detail(run, loader, views)
        fix = _views_fix(fix)
        evidence["batch_views"] = cast("BatchViews", _views_evidence(views))
    return title, detail, fix


def _by_kind(run: RunData, loader: LoaderRecord, rows: list[dict[str, Any]], peer_bytes: int) -> list[Finding]:
    """cow-growth from anonymous private memory only; file and tmpfs pages get an info finding at most."""
    findings = []
    cost = _cost(run, loader, rows, peer_bytes)
    grown = [r for r in rows if r["counted"]]
    if cost and cost["worth"]:
        evidence: Evidence = _evidence(loader, rows) | _cost_evidence(cost)
        cow = max(r["cow_bytes"] for r in grown)
        new = max(r["anon_growth_bytes"] for r in grown)
        lid = loader.loader_id
        if cow >= new:
            title = (
                f"{len(grown)} of {len(rows)} workers of loader {lid} each copied up to {format_bytes(cow)} of the "
                f"parent's memory, {_cost_text(cost)} (copy-on-write: Private_Dirty rose while Anonymous stayed flat)"
            )
            detail = (
                "Forked workers share the parent's pages until they write to them. Reading a Python object changes "
                "its reference count, and the garbage collector writes to every object it visits, so the kernel "
                "copies each such page into the worker: private dirty memory climbs while the amount of anonymous "
                "memory does not, and with enough workers the job is OOM-killed ('DataLoader worker (pid N) is "
                "killed by signal: Killed.')."
                + (f" The workers also allocated up to {format_bytes(new)} of new memory." if new >= MiB else "")
            )
            fix = _cow_fix(evidence["suspects"], cow, loader.gc_at_fork)
            evidence["variant"] = COW_COPIED
        elif same_load(rows):
            title = (
                f"Each of the {len(rows)} workers of loader {lid} loaded its own copy of the same data at start: "
                f"up to {format_bytes(new)} of new anonymous memory each, then flat; {_cost_text(cost)}"
            )
            detail = (
                "Every worker's anonymous memory rose by about the same amount in the first part of its life and "
                "stayed there: most likely each worker read the same data into its own memory (np.load, "
                "torch.load or a decoded file in worker_init_fn or on the first sample), so the job holds it "
                f"{len(rows)} times over, and once more per rank and per experiment on the machine."
            )
            fix = (
                "Load it once and share the pages: `data = shm_array('data-v1', lambda: np.load(path))` (from "
                "dlprobe.fixes import shm_array) in the parent before the DataLoader starts its workers (every "
                "worker, rank and later run on this machine then maps one copy in /dev/shm), or "
                "`np.load(path, mmap_mode='r')` for a .npy file."
            )
            evidence["variant"] = COW_LOADED_AT_START
        else:
            grown_attrs = grown_attributes(run, loader)
            title = (
                f"Workers of loader {lid} keep allocating{_grown_title(grown_attrs)}: up to {format_bytes(new)} of "
                f"new anonymous memory each, {_cost_text(cost)} (Anonymous rose), not copy-on-write"
            )
            detail = (
                "The workers' anonymous memory grew, so the growth is new allocations inside the workers (a cache, a "
                "list that grows per sample, decoded data kept alive) rather than the parent's pages being copied."
                + (f" Copy-on-write added up to {format_bytes(cow)} more." if cow >= MiB else "")
                + _grown_detail(grown_attrs)
            )
            fix = growth_fix(grown_attrs) or (
                "Look for state that grows in __getitem__ (caches without a bound, appended lists) and bound or "
                "remove it, or keep it in the parent before the workers start."
            )
            title, detail, fix = _allocating(run, loader, grown_attrs, evidence, (title, detail, fix))
        detail += _projection_note(cost) + teardown_note(run, run.workers(lid))
        evidence.update(as_evidence(teardown_evidence(run, run.workers(lid))))
        findings.append(Finding("cow-growth", _severity(rows, cost), title, detail, fix, evidence, lid))
    mapped = [r for r in rows if r["pss_file_growth_bytes"] + r["pss_shmem_growth_bytes"] >= MAPPED_MIN_GROWTH]
    if mapped:
        worst = max(mapped, key=lambda r: r["pss_file_growth_bytes"] + r["pss_shmem_growth_bytes"])
        findings.append(
            Finding(
                "mapped-pages",
                "info",
                (
                    f"Workers of loader {loader.loader_id} mapped up to "
                    f"{format_bytes(worst['pss_file_growth_bytes'])} of file pages and "
                    f"{format_bytes(worst['pss_shmem_growth_bytes'])} of /dev/shm pages each (memory-mapped data)"
                ),
                MAPPED_NOTE,
                "Nothing to fix: memory-mapped files are the recommended way to share data with workers.",
                {
                    "workers": [
                        cast(
                            "WorkerRow",
                            {k: r[k] for k in ("pid", "worker_id", "pss_file_growth_bytes", "pss_shmem_growth_bytes")},
                        )
                        for r in rows
                    ]
                },
                loader.loader_id,
            )
        )
    return findings


def _by_uss(run: RunData, loader: LoaderRecord, rows: list[dict[str, Any]], peer_bytes: int) -> list[Finding]:
    """Runs recorded without page kinds: USS growth, told apart by whether RSS grew with it."""
    cost = _cost(run, loader, rows, peer_bytes)
    if not cost or not cost["worth"]:
        return []
    grown = [r for r in rows if r["counted"]]
    copy_on_access = [r for r in grown if r["rss_growth_bytes"] < COW_RSS_SHARE * r["uss_growth_bytes"]]
    evidence: Evidence = _evidence(loader, rows) | _cost_evidence(cost)
    suspects = evidence["suspects"]
    worst = max(grown, key=lambda r: r["uss_growth_bytes"])
    if copy_on_access:
        title = (
            f"{len(grown)} of {len(rows)} workers of loader {loader.loader_id} each copied up to "
            f"{format_bytes(worst['uss_growth_bytes'])} of the dataset into private memory (USS), "
            f"{_cost_text(cost)}, while RSS stayed flat"
        )
        detail = (
            "Forked workers share the dataset's pages with the main process until they touch them. Reading a "
            "Python object changes its reference count, so the kernel copies every page the worker reads: USS "
            "and PSS climb each epoch while RSS does not move, and with enough workers the job is OOM-killed "
            "('DataLoader worker (pid N) is killed by signal: Killed.')."
        )
        fix = _cow_fix(suspects, worst["uss_growth_bytes"], loader.gc_at_fork)
        evidence["variant"] = COW_COPIED
    else:
        grown_attrs = grown_attributes(run, loader)
        title = (
            f"Workers of loader {loader.loader_id} keep allocating{_grown_title(grown_attrs)}: up to "
            f"{format_bytes(worst['uss_growth_bytes'])} more private memory each, {_cost_text(cost)}, "
            "and RSS grew with it"
        )
        detail = (
            "RSS grew along with USS, so the growth is new allocations inside the workers (a cache, a list that "
            "grows per sample, decoded data kept alive) rather than shared pages being copied."
        ) + _grown_detail(grown_attrs)
        fix = growth_fix(grown_attrs) or (
            "Look for state that grows in __getitem__ (caches without a bound, appended lists) and bound or "
            "remove it; " + _suspects_fix(suspects)
        )
        title, detail, fix = _allocating(run, loader, grown_attrs, evidence, (title, detail, fix))
    detail += _projection_note(cost) + teardown_note(run, run.workers(loader.loader_id))
    evidence.update(as_evidence(teardown_evidence(run, run.workers(loader.loader_id))))
    return [Finding("cow-growth", _severity(rows, cost), title, detail, fix, evidence, loader.loader_id)]


def find_cow_growth(run: RunData, peer_bytes: int = 0) -> list[Finding]:
    """`peer_bytes`: the copies of the other ranks' workers on this node (cow_total of each), judged with these."""
    findings = []
    for loader in run.loaders:
        if loader.num_workers == 0 or loader.start_method not in ("fork", None):
            continue
        rows = worker_growth_rows(run, loader)
        if rows and all("cow_bytes" in r for r in rows):
            findings.extend(_by_kind(run, loader, rows, peer_bytes))
        else:
            findings.extend(_by_uss(run, loader, rows, peer_bytes))
    return findings


# What a finding that grows memory explains: the OOM kill it leads to and the memory bound on workers it sets.
MEMORY_CAUSES = ("cow-growth", "spawn-copy", "attached-memory-growth")


def explains(cause: Finding, symptom: Finding) -> str | None:
    """Growth that fills memory explains the kernel's OOM kill of a worker or of the training process, and a
    worker count that memory cannot hold."""
    if cause.code not in MEMORY_CAUSES or not same_loader(cause, symptom):
        return None
    ev = symptom.evidence
    if symptom.code == "worker-killed" and ev.get("cause") == "oom":
        return f"the kernel's OOM kill of {worker_name(symptom)} (worker-killed)"
    if symptom.code == "script-killed" and ev.get("cause") == "oom":
        return "the kernel's OOM kill of the training process (script-killed)"
    fit, workers = ev.get("workers_that_fit_memory"), ev.get("num_workers")
    if symptom.code == "too-many-workers" and isinstance(fit, int) and isinstance(workers, int) and fit < workers:
        return f"that only {fit} of {workers} workers fit the memory left (too-many-workers)"
    return None
