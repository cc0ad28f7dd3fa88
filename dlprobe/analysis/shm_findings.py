"""Shared-memory findings: /dev/shm close to full, with the batches-in-flight estimate.

What a batch puts in /dev/shm is its tensors' storages, not their own bytes: a tensor that is a view of a larger one
(a slice of a decoded chunk kept as it is by a collate_fn that does not stack, or batch_size=None) is sent with its
whole storage. The hooks record both for the first batch the loop receives (`bytes`, `storage_bytes`); where the
storages are VIEW_RATIO times the tensors or more, the estimate counts what is sent and the finding names the views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.model import Finding, LoaderRecord, RunData
from dlprobe.rundir.schema import EV_BATCH_SEND_ERROR
from dlprobe.units import format_bytes

SHM_PRESSURE_SHARE = 0.8  # peak use above this share of /dev/shm is one burst away from a bus error
IN_FLIGHT_SHARE = 0.5  # or when the loaders' own in-flight estimate takes half of it
# Storages this many times the batch's own bytes: the batch is views of larger tensors (a few bytes of slack, such as
# a storage rounded up, is not one).
VIEW_RATIO = 2.0
# A worker's queue refused to share a batch for want of /dev/shm (torch's _share_fd_cpu_ / _share_filename_cpu_).
SHM_SPACE_FIX = (
    "Give the job more shared memory (docker run --shm-size=8g or --ipc=host; a bigger emptyDir "
    "medium: Memory volume on Kubernetes), or lower prefetch_factor, num_workers or the batch size."
)
VIEWS_FIX = (
    "Return copies, not views, from `__getitem__`: `chunk[start:stop].clone()` (numpy: `np.ascontiguousarray(a[i])` "
    "or `a[i].copy()` before `torch.from_numpy`), so a batch sends its own bytes, not the whole tensors it was cut "
    "from; default_collate, which stacks the samples into a new tensor, does too."
)


@dataclass(frozen=True)
class SentBytes:
    """What one batch of a loader holds and what sharing it sends: its tensors' own bytes and their storages'."""

    own: int
    sent: int

    @property
    def ratio(self) -> float:
        return self.sent / self.own if self.own else 0.0

    @property
    def views(self) -> bool:
        return self.own > 0 and self.sent >= VIEW_RATIO * self.own


def sent_bytes(batch_info: dict[str, Any] | None) -> SentBytes | None:
    """The first received batch's own and storage bytes; None where they were not both recorded."""
    own, stored = (batch_info or {}).get("bytes"), (batch_info or {}).get("storage_bytes")
    if not isinstance(own, int) or not isinstance(stored, int) or own <= 0:
        return None
    return SentBytes(own, max(own, stored))


def views_text(sent: SentBytes) -> str:
    """The batch's bytes against what it sends, in words."""
    return (
        f"batches hold {format_bytes(sent.own)} each but send {format_bytes(sent.sent)} (storages {sent.ratio:.0f}x "
        "larger: views of larger tensors, each sent with its whole storage)"
    )


def loader_sent(run: RunData, lo: LoaderRecord) -> SentBytes | None:
    """What the loader's batches hold and send: the first batch the loop received, or where none came (each was
    dropped), the first batch its workers' queues could not send."""
    sent = sent_bytes(lo.batch_info)
    if sent is not None:
        return sent
    for event in run.events:
        if event.get("ev") == EV_BATCH_SEND_ERROR and event.get("loader") == lo.loader_id:
            dropped = sent_bytes({"bytes": event.get("batch_bytes"), "storage_bytes": event.get("storage_bytes")})
            if dropped is not None:
                return dropped
    return None


def loader_views(run: RunData, lo: LoaderRecord) -> SentBytes | None:
    """The loader's batches' bytes where they are views of larger storages; None where they are not (or not read)."""
    sent = loader_sent(run, lo)
    return sent if sent is not None and sent.views and not lo.thread_workers else None


def in_flight_bytes(num_workers: int, prefetch_factor: int | None, batch_bytes: int | None) -> int:
    """Bytes of batches waiting in shared memory: num_workers x prefetch_factor x batch bytes."""
    if not num_workers or not batch_bytes:
        return 0
    return num_workers * (prefetch_factor or 2) * batch_bytes


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
