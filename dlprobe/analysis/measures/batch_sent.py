"""What a loader's batch holds and what handing it to the training process sends: its tensors' own bytes and their
storages'. A tensor that is a view of a larger one (a slice of a decoded chunk kept as it is by a collate_fn that does
not stack, or batch_size=None) is sent with its whole storage, into /dev/shm; the hooks record both for the first
batch the loop receives. One home for the facts /dev/shm pressure, a refused send and the workers' growth all ask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_BATCH_SEND_ERROR
from dlprobe.units import format_bytes

# Storages this many times the batch's own bytes: the batch is views of larger tensors (a few bytes of slack, such as
# a storage rounded up, is not one).
VIEW_RATIO = 2.0
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
