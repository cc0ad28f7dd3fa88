"""Shared-memory findings: /dev/shm close to full, with the batches-in-flight estimate.

What a batch puts in /dev/shm is its tensors' storages, not their own bytes: a tensor that is a view of a larger one
(a slice of a decoded chunk kept as it is by a collate_fn that does not stack, or batch_size=None) is sent with its
whole storage. The hooks record both for the first batch the loop receives (`bytes`, `storage_bytes`); where the
storages are VIEW_RATIO times the tensors or more (measures/batch_sent.py), the estimate counts what is sent and the
finding names the views."""

from __future__ import annotations

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.common import SHM_SPACE_FIX, same_loader, worker_name
from dlprobe.analysis.measures.batch_sent import VIEWS_FIX, in_flight_bytes, loader_sent, loader_views, views_text
from dlprobe.analysis.run.model import RunData
from dlprobe.units import format_bytes

SHM_PRESSURE_SHARE = 0.8  # peak use above this share of /dev/shm is one burst away from a bus error
IN_FLIGHT_SHARE = 0.5  # or when the loaders' own in-flight estimate takes half of it


def find_shm_pressure(run: RunData) -> list[Finding]:
    total = run.system.shm_total
    used = [u for u in run.system.shm_used if u is not None]
    if not total or not used:
        return []
    start, peak = used[0], max(used)
    loaders = []
    for lo in run.loaders:
        if lo.thread_workers:
            continue  # thread workers hand batches over through an in-process queue: none waits in /dev/shm
        sent = loader_sent(run, lo)
        batch_bytes = (lo.batch_info or {}).get("bytes") or (sent.own if sent else None)
        # What waits in /dev/shm is what each batch sends: its storages where they are larger than its tensors.
        estimate = in_flight_bytes(lo.num_workers, lo.config.get("prefetch_factor"), sent.sent if sent else batch_bytes)
        loaders.append(
            {
                "loader_id": lo.loader_id,
                "num_workers": lo.num_workers,
                "prefetch_factor": lo.config.get("prefetch_factor"),
                "batch_bytes": batch_bytes,
                "sent_bytes": sent.sent if sent else None,
                "storage_ratio": round(sent.ratio, 1) if sent else None,
                "in_flight_bytes": estimate,
            }
        )
    in_flight = sum(int(lo["in_flight_bytes"] or 0) for lo in loaders)
    if peak < SHM_PRESSURE_SHARE * total and in_flight < IN_FLIGHT_SHARE * total:
        return []
    viewed = [(lo, v) for lo in run.loaders if (v := loader_views(run, lo)) is not None]
    title = (
        f"/dev/shm is close to full: peak {format_bytes(peak)} of {format_bytes(total)}, "
        f"batches in flight need ~{format_bytes(in_flight)}"
    )
    detail = (
        "Worker processes hand batches to the training process through shared memory in /dev/shm. "
        "In-flight batches take num_workers x prefetch_factor x the bytes each batch sends; when /dev/shm fills, a "
        "worker dies with 'DataLoader worker (pid N) is killed by signal: Bus error.' or 'unable to allocate "
        "shared memory(shm)'. Containers often give /dev/shm only 64 MB."
    )
    fix = SHM_SPACE_FIX
    if viewed:
        lo, sent = viewed[0]
        own_in_flight = in_flight_bytes(lo.num_workers, lo.config.get("prefetch_factor"), sent.own)
        title += f": loader {lo.loader_id}'s {views_text(sent)}"
        detail += (
            f" Loader {lo.loader_id}'s first batch holds {format_bytes(sent.own)} of tensors whose storages hold "
            f"{format_bytes(sent.sent)}: its tensors are slices (views) of larger ones, and sharing a view sends "
            "its whole storage. default_collate stacks samples into a new tensor; this loader's batches keep the "
            "samples as they are (a collate_fn that does not stack, or batch_size=None). Ruled out as the whole "
            f"cause: the batches' own size ({format_bytes(own_in_flight)} "
            "in flight at their own bytes)."
        )
        fix = f"{VIEWS_FIX} Otherwise: {SHM_SPACE_FIX[0].lower()}{SHM_SPACE_FIX[1:]}"
    return [
        Finding(
            code="shm-pressure",
            severity="warning",
            title=title,
            detail=detail,
            fix=fix,
            evidence={
                "shm_total_bytes": total,
                "shm_start_bytes": start,
                "shm_peak_bytes": peak,
                "in_flight_estimate_bytes": in_flight,
                "loaders": loaders,
                "views": bool(viewed),
            },
        )
    ]


# What a full /dev/shm explains: a worker's bus error, the allocation refused once it was full.
SHM_CAUSES = ("shm-pressure", "shm-exhausted")


def explains(cause: Finding, symptom: Finding) -> str | None:
    """A full /dev/shm explains a worker killed by SIGBUS, and (read filling) the allocation then refused."""
    if cause.code not in SHM_CAUSES or not same_loader(cause, symptom):
        return None
    if symptom.code == "worker-killed" and symptom.evidence.get("cause") == "bus":
        return f"the bus error that killed {worker_name(symptom)} (worker-killed)"
    if cause.code == "shm-pressure" and symptom.code == "shm-exhausted":
        return "the full /dev/shm (shm-exhausted)"
    return None
