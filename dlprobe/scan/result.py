"""The scan's result: folded from the target's events, written as --json, grouped by reason for the terminal."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlprobe.rundir.schema import (
    EV_LOADER,
    EV_SCAN_BAD,
    EV_SCAN_END,
    EV_SCAN_ERROR,
    EV_SCAN_PROGRESS,
    EV_SCAN_START,
    EV_SCRIPT_ERROR,
    EV_TAKEOVER,
)

SCHEMA_VERSION = 1
PROBLEM_KINDS = ("exception", "crash", "timeout", "none", "shape", "dtype", "nan")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+")


@dataclass
class ScanResult:
    """What one `dlprobe scan` found; complete or not, it is always written out."""

    script: str
    argv: list[str]
    loader: int
    selection: str = "all"
    dataset_type: str | None = None
    iterable: bool = False
    total: int | None = None
    selected: int | None = None
    scanned: int = 0
    duration_s: float | None = None
    workers: int | None = None
    start_method: str | None = None
    shapes: bool | None = None
    shape_note: str | None = None
    started: bool = False
    complete: bool = False
    interrupted: bool = False
    note: str | None = None
    error: tuple[str, str] | None = None  # (message, hint) when the scan could not run
    script_error: dict[str, Any] | None = None
    loaders_seen: set[int] = field(default_factory=set)
    taken_over: bool = False
    returncode: int | None = None
    bad_by_index: dict[int, dict[str, Any]] = field(default_factory=dict)

    def feed(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            kind = ev.get("ev")
            if kind == EV_LOADER:
                self.loaders_seen.add(int(ev.get("loader", 0)))
            elif kind == EV_TAKEOVER:
                self.taken_over = True
            elif kind == EV_SCAN_START:
                self.started = True
                for name in ("dataset_type", "iterable", "total", "selected", "workers", "start_method", "shapes"):
                    setattr(self, name, ev.get(name))
                self.shape_note = ev.get("shape_note")
            elif kind == EV_SCAN_PROGRESS:
                self.scanned = int(ev["done"])
            elif kind == EV_SCAN_BAD:
                entry = {k: ev[k] for k in ("index", "kind", "detail", "path", "where") if ev.get(k) is not None}
                self.bad_by_index[int(ev["index"])] = entry
            elif kind == EV_SCAN_END:
                self.scanned = int(ev["scanned"])
                self.duration_s = ev.get("duration_s")
                self.interrupted = self.interrupted or bool(ev.get("interrupted"))
                self.complete = not self.interrupted
                self.note = ev.get("note")
            elif kind == EV_SCAN_ERROR:
                self.error = (str(ev.get("message")), str(ev.get("hint") or ""))
            elif kind == EV_SCRIPT_ERROR:
                self.script_error = ev

    @property
    def unit(self) -> str:
        """IterableDatasets have no indices, only positions in the stream."""
        return "position" if self.iterable else "index"

    @property
    def bad(self) -> list[dict[str, Any]]:
        """Bad samples in index order, each keyed by `index` (or `position` for a stream)."""
        return [
            {self.unit: index, **{k: v for k, v in self.bad_by_index[index].items() if k != "index"}}
            for index in sorted(self.bad_by_index)
        ]

    @property
    def died(self) -> bool:
        """The target process ended in the middle of the scan without saying it finished."""
        return self.started and not self.complete and not self.interrupted and self.error is None

    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.died:
            return 2
        return 1 if self.bad_by_index else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "script": self.script,
            "argv": self.argv,
            "loader": self.loader,
            "dataset_type": self.dataset_type,
            "iterable": self.iterable,
            "unit": self.unit,
            "total": self.total,
            "selection": self.selection,
            "selected": self.selected,
            "scanned": self.scanned,
            "duration_s": self.duration_s,
            "complete": self.complete,
            "interrupted": self.interrupted,
            "workers": self.workers,
            "start_method": self.start_method,
            "checks": {"shape": self.shapes, "shape_note": self.shape_note},
            "note": self.note,
            "bad": self.bad,
        }


def reason_key(entry: dict[str, Any]) -> tuple[str, str]:
    """Entries that differ only in numbers or quoted names (paths) share a reason."""
    detail = _NUMBER.sub("N", _QUOTED.sub("'…'", str(entry.get("detail", ""))))
    return str(entry["kind"]), detail


def group_by_reason(bad: list[dict[str, Any]]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(kind, reason shown, entries) groups, biggest first; the reason shown is the first entry's detail."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in bad:
        groups.setdefault(reason_key(entry), []).append(entry)
    ordered = sorted(groups.items(), key=lambda item: (PROBLEM_KINDS.index(item[0][0]), -len(item[1])))
    out = []
    for (kind, _), entries in ordered:
        details = {e["detail"] for e in entries}
        shown = entries[0]["detail"] + (" (and similar)" if len(details) > 1 else "")
        out.append((kind, shown, entries))
    return out
