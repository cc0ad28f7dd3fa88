"""The loop's per-batch waits of one loader, folded past a size so a run of any length writes a bounded amount.

The first WAITS_KEPT_PER_STRIDE batches' waits (and hand-over times) are sent one per batch, as always. After that
only every 2nd batch's are kept, after as many again every 4th, ...: the waits kept grow with the log of the batches.
Each chunk of a folded loader also carries its exact batch count, summed and longest wait and summed hand-over
(`analysis/run/model.py` reads those for the totals and means, and the kept waits, thinned to one stride, for the
medians and percentiles). An epoch's first batch is always kept (its start-up is a finding of its own)."""

from __future__ import annotations

from typing import Any

from dlprobe.rundir.schema import WAITS_KEPT_PER_STRIDE


class WaitFolder:
    def __init__(self, kept_per_stride: int = WAITS_KEPT_PER_STRIDE) -> None:
        self.kept_per_stride = kept_per_stride
        self.stride = 1
        self.kept_at_stride = 0
        self.seen = 0  # batches over every epoch
        self._reset()

    def _reset(self) -> None:
        self.waits: list[float] = []
        self.handovers: list[float] = []
        self.n = 0
        self.wait_s = 0.0
        self.wait_max = 0.0
        self.handover_s = 0.0
        self.timed = True  # every batch of the chunk had its hand-over timed

    @property
    def folded(self) -> bool:
        return self.stride > 1

    def add(self, wait_s: float, handover_s: float | None, epoch_first: bool) -> None:
        self.n += 1
        self.wait_s += wait_s
        self.wait_max = max(self.wait_max, wait_s)
        if handover_s is None:
            self.timed = False
        else:
            self.handover_s += handover_s
        index, self.seen = self.seen, self.seen + 1
        if not epoch_first and index % self.stride:
            return
        self.waits.append(wait_s)
        if handover_s is not None:
            self.handovers.append(handover_s)
        self.kept_at_stride += 1
        if self.kept_at_stride >= self.kept_per_stride:
            self.stride, self.kept_at_stride = self.stride * 2, 0

    def take(self) -> dict[str, Any] | None:
        """The chunk's fields for a `batches` event, or None without a batch since the last one."""
        if not self.n:
            return None
        fields: dict[str, Any] = {"waits": [round(w, 6) for w in self.waits]}
        if self.timed and len(self.handovers) == len(self.waits):
            fields["handovers"] = [round(h, 6) for h in self.handovers]
        if len(self.waits) != self.n:  # some batch of the chunk was folded: its exact totals
            fields.update(stride=self.stride, n=self.n, wait_s=round(self.wait_s, 6), wait_max=round(self.wait_max, 6))
            if self.timed:
                fields["handover_s"] = round(self.handover_s, 6)
        self._reset()
        return fields
