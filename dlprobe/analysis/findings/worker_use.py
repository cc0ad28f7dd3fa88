"""Advice on what the workers and the pinning thread are used for: workers that sit idle (a sharded dataset's
shards fewer than its workers, an iterable dataset that does not split), and pin_memory without an accelerator."""

from __future__ import annotations

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.measures.stats import metric_summary
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_ACCEL, EV_PROCESS
from dlprobe.units import format_bytes

NO_ACCELERATOR_WARNING = (
    "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used."
)


def _world_size(run: RunData, loader: LoaderRecord) -> int:
    """How many ranks read the same data: the world size the loader's process reported (1 outside a job)."""
    sizes = [e.get("world_size") for e in events_of(run, EV_PROCESS) if e.get("pid") == loader.writer]
    known = [int(size) for size in sizes if isinstance(size, int) and size > 0]
    return known[-1] if known else 1


def _shard_knob(dataset_type: str, shards: int) -> str:
    """How the user's library sets the number of shards, for the dataset class the probe saw."""
    if dataset_type.startswith("datasets."):
        return (
            f"HuggingFace datasets: ds.to_iterable_dataset(num_shards={shards}) (or save the data as {shards}+ files)"
        )
    if "webdataset" in dataset_type:
        return f"webdataset: at least {shards} shard files (e.g. shards-{{000000..{shards - 1:06d}}}.tar)"
    return f"a hand-written dataset: split the data into at least {shards} shards (files, line ranges, streams)"


def find_idle_workers(run: RunData) -> list[Finding]:
    """Workers that delivered no batch in an epoch: for an IterableDataset, fewer shards than workers x ranks."""
    findings = []
    for loader in run.loaders:
        nw = loader.num_workers
        iterable = bool(loader.dataset.get("iterable"))
        idle_epochs: list[tuple[int, list[int], int]] = []
        for epoch in loader.epochs:
            counts = epoch.worker_batches
            # Only an epoch that ran to its end has its final counts: a worker may still be on its first batch.
            if nw < 2 or counts is None or epoch.t_end is None:
                continue
            # A map-style loader sends indices to the workers in turn, so an epoch of fewer batches than workers
            # leaves some without a batch by arithmetic, not by a fault.
            if not iterable and sum(counts) < nw:
                continue
            idle = [worker_id for worker_id, count in enumerate(counts) if count == 0]
            if idle:
                idle_epochs.append((epoch.epoch, idle, sum(counts)))
        if not idle_epochs:
            continue
        first_epoch, idle, batches = idle_epochs[0]
        busy = nw - len(idle)
        ranks = _world_size(run, loader)
        streams = nw * ranks
        shards = loader.dataset.get("shards")
        names = ", ".join(str(i) for i in idle)
        later = ", ".join(str(e) for e, _, _ in idle_epochs[1:])
        idle_bytes = [
            metric_summary(p.series, "uss")["peak"] for p in run.workers(loader.loader_id) if p.worker_id in idle
        ]
        if iterable:
            # In a job this is one rank's view: other ranks may have fed all their workers.
            whose = f"this rank's {nw} workers (one of {ranks} ranks)" if ranks > 1 else f"its {nw} workers"
            reason = (
                (
                    f"Its IterableDataset gave data to only {busy} of {whose}"
                    if busy
                    else f"No data reached any of {whose}"
                )
                + (f": it has {shards} shard(s)" if isinstance(shards, int) else "")
                + ". A dataset that splits its shards by worker (get_worker_info(): worker k reads shards k, k+n, ...)"
                + (" and by rank" if ranks > 1 else "")
                + f" needs at least {streams} shards (num_workers x ranks) to give each worker one; with fewer, the "
                "rest start, hold their memory and read nothing"
                + (", and a rank with no shard at all trains on nothing (see uneven-ranks)." if ranks > 1 else ".")
            )
            more = f"at least {streams} shards (a multiple of {streams}) to keep every worker busy: " + _shard_knob(
                loader.dataset.get("type") or "", streams
            )
            # Fewer workers is the other way out only for a single process: across ranks the shards must cover all.
            fix = (
                f"DataLoader(..., num_workers={busy}) for the same throughput at less memory, or {more}."
                if busy and ranks == 1
                else f"Use {more}."
            )
        else:
            reason = (
                f"The epoch had {batches} batches for {nw} workers, so each should have got one in turn; the idle "
                "ones never delivered (a custom iterator, or a worker that stopped)."
            )
            fix = f"Check why worker(s) {names} delivered nothing; DataLoader(..., num_workers={busy}) uses what works."
        findings.append(
            Finding(
                code="idle-workers",
                severity="warning",
                title=f"Worker{'s' if len(idle) > 1 else ''} {names} of loader {loader.loader_id} delivered no batch "
                f"in epoch {first_epoch}" + (f" (and in epoch(s) {later})" if later else ""),
                detail=reason
                + (
                    f" The idle workers held {format_bytes(sum(b for b in idle_bytes if b))} of private memory."
                    if any(idle_bytes)
                    else ""
                ),
                fix=fix,
                evidence={
                    "num_workers": nw,
                    "idle_worker_ids": idle,
                    "epochs": [e for e, _, _ in idle_epochs],
                    "worker_batches": next(
                        e.worker_batches for e in loader.epochs if e.epoch == first_epoch and e.worker_batches
                    ),
                    "iterable": iterable,
                    "world_size": ranks,
                    "shards": shards,
                    # The condition, said: a map-style epoch with fewer batches than workers is never counted.
                    "condition": "iterable dataset, epoch ended"
                    if iterable
                    else f"map-style, epoch ended with {batches} >= {nw} batches",
                },
                loader_id=loader.loader_id,
            )
        )
    return findings


def find_pin_memory(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        accel = next(iter(events_of(run, EV_ACCEL, loader.loader_id)), None)
        if accel is None:
            continue
        pin = bool(loader.config.get("pin_memory"))
        evidence: Evidence = {"pin_memory": pin, "pin_effective": accel.get("pin_effective"),
                    "cuda_initialized": accel.get("cuda_initialized"),
                    "batch_bytes": (loader.batch_info or {}).get("bytes")}  # fmt: skip
        if pin and accel.get("pin_effective") is False:
            findings.append(
                Finding(
                    code="pin-memory",
                    severity="info",
                    title=f"Loader {loader.loader_id} sets pin_memory=True but there is no accelerator to pin for",
                    detail=f"PyTorch warns '{NO_ACCELERATOR_WARNING}' and loads batches unpinned.",
                    fix="Drop pin_memory=True on machines without a GPU (e.g. pin_memory=torch.cuda.is_available()).",
                    evidence=evidence,
                    loader_id=loader.loader_id,
                )
            )
        elif not pin and accel.get("cuda_initialized"):
            findings.append(
                Finding(
                    code="pin-memory",
                    severity="warning",
                    title=f"Loader {loader.loader_id} has pin_memory=False while the script uses the GPU",
                    detail=(
                        "Batches copied from pageable memory to the GPU go through a staging buffer and cannot "
                        "overlap with compute; pinned batches can be copied asynchronously."
                    ),
                    fix="DataLoader(..., pin_memory=True) and move batches with x.to(device, non_blocking=True).",
                    evidence=evidence,
                    loader_id=loader.loader_id,
                )
            )
    return findings
