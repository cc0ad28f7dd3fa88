"""The scan's result: folded from the target's events, written as --json, grouped by reason for the terminal."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlprobe.redact import redact_text
from dlprobe.rundir.schema import (
    EV_LOADER,
    EV_SCAN_BAD,
    EV_SCAN_END,
    EV_SCAN_ERROR,
    EV_SCAN_PROGRESS,
    EV_SCAN_SKIPPED,
    EV_SCAN_START,
    EV_SCRIPT_ERROR,
    EV_TAKEOVER,
)
from dlprobe.rundir.validate import event_problem

SCHEMA_VERSION = 2  # 2: `loaders` holds one entry per loader checked; bad entries name their loader
PROBLEM_KINDS = ("exception", "crash", "timeout", "none", "shape", "dtype", "nan")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+")
_START_FIELDS = ("dataset_type", "iterable", "total", "selected", "workers", "start_method", "shapes", "shape_note",
                 "role")  # fmt: skip


@dataclass
class LoaderScan:
    """One loader's dataset, checked: what, how, and what was bad."""

    loader: int | None  # the probe's number (order of first iteration); None for a loader found but never iterated
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
    role: str | None = None  # e.g. Lightning's sanity-check validation loader
    other_loaders: list[dict[str, Any]] = field(default_factory=list)  # alive besides it and not checked
    complete: bool = False
    interrupted: bool = False
    note: str | None = None
    bad_by_index: dict[int, dict[str, Any]] = field(default_factory=dict)

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

    def label(self) -> str:
        number = f"loader {self.loader}" if self.loader is not None else "a loader not yet iterated"
        size = f"{self.total:,} samples" if self.total is not None else "a stream"
        return f"{number} ({self.dataset_type}, {size}" + (f": {self.role})" if self.role else ")")

    def to_json(self) -> dict[str, Any]:
        return {
            "loader": self.loader,
            "dataset_type": self.dataset_type,
            "role": self.role,
            "iterable": self.iterable,
            "unit": self.unit,
            "total": self.total,
            "selected": self.selected,
            "scanned": self.scanned,
            "duration_s": self.duration_s,
            "complete": self.complete,
            "workers": self.workers,
            "start_method": self.start_method,
            "checks": {"shape": self.shapes, "shape_note": self.shape_note},
            "note": self.note,
            "bad": self.bad,
        }


def _redacted(message: Any) -> Any:
    """A message from the script's data (a sample's exception, the script's own) without credentials in it."""
    return redact_text(message) if isinstance(message, str) else message


@dataclass
class ScanResult:
    """What one `dlprobe scan` found over one or more loaders; complete or not, it is always written out."""

    script: str
    argv: list[str]
    loader: int | None  # what was asked: a loader's number, or None for every loader before training
    selection: str = "all"
    scans: list[LoaderScan] = field(default_factory=list)
    interrupted: bool = False
    error: tuple[str, str] | None = None  # (message, hint) when the scan could not run
    script_error: dict[str, Any] | None = None
    loaders_seen: set[int] = field(default_factory=set)
    taken_over: bool = False
    returncode: int | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)  # loaders found but not scannable, and why

    def feed(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            if event_problem(ev) is not None:  # damaged or of another version: skipped, as load_run does
                continue
            kind = ev.get("ev")
            if kind == EV_LOADER:
                self.loaders_seen.add(int(ev.get("loader", 0)))
            elif kind == EV_TAKEOVER:
                self.taken_over = True
            elif kind == EV_SCAN_START:
                scan = LoaderScan(ev.get("loader"))
                for name in _START_FIELDS:
                    setattr(scan, name, ev.get(name))
                scan.iterable = bool(scan.iterable)
                scan.other_loaders = list(ev.get("other_loaders") or [])
                self.scans.append(scan)
            elif kind == EV_SCAN_PROGRESS and self.scans:
                self.scans[-1].scanned = int(ev["done"])
            elif kind == EV_SCAN_BAD and self.scans:
                entry = {k: ev[k] for k in ("index", "kind", "detail", "path", "where") if ev.get(k) is not None}
                if "detail" in entry:  # a sample's exception may quote a URL with its password
                    entry["detail"] = _redacted(entry["detail"])
                self.scans[-1].bad_by_index[int(ev["index"])] = entry
            elif kind == EV_SCAN_END and self.scans:
                scan = self.scans[-1]
                scan.scanned = int(ev["scanned"])
                scan.duration_s = ev.get("duration_s")
                scan.interrupted = bool(ev.get("interrupted"))
                scan.complete = not scan.interrupted
                scan.note = ev.get("note")
                self.interrupted = self.interrupted or scan.interrupted
            elif kind == EV_SCAN_ERROR:
                self.error = (_redacted(str(ev.get("message"))), str(ev.get("hint") or ""))
            elif kind == EV_SCAN_SKIPPED:
                skipped = {k: ev.get(k) for k in ("dataset_type", "message", "hint")}
                self.skipped.append({**skipped, "message": _redacted(skipped["message"])})
            elif kind == EV_SCRIPT_ERROR:
                self.script_error = {**ev, "message": _redacted(ev.get("message"))}

    @property
    def started(self) -> bool:
        return bool(self.scans)

    @property
    def current(self) -> LoaderScan:
        """The loader being (or last) checked: what the progress bar shows."""
        return self.scans[-1] if self.scans else LoaderScan(self.loader)

    @property
    def complete(self) -> bool:
        return self.started and all(scan.complete for scan in self.scans)

    @property
    def bad_count(self) -> int:
        return sum(len(scan.bad_by_index) for scan in self.scans)

    @property
    def unit(self) -> str:
        return self.current.unit

    @property
    def bad(self) -> list[dict[str, Any]]:
        """Bad samples of every loader checked; with more than one loader, each names its loader."""
        if len(self.scans) == 1:
            return self.scans[0].bad
        return [
            {"loader": scan.loader, "dataset_type": scan.dataset_type, **e} for scan in self.scans for e in scan.bad
        ]

    @property
    def died(self) -> bool:
        """The target process ended in the middle of the scan without saying it finished."""
        return self.started and not self.complete and not self.interrupted and self.error is None

    def unchecked_note(self) -> str | None:
        """Says plainly that not every loader was checked, which others there are, and how to check the next one."""
        if not self.started:
            return None
        last = self.scans[-1]
        sanity = (last.role or "").startswith("Lightning's sanity-check")
        if not last.other_loaders and not sanity and not self.skipped:
            return None
        checked = "; ".join(scan.label() for scan in self.scans)
        text = f"only {checked} {'was' if len(self.scans) == 1 else 'were'} checked"
        if last.other_loaders:
            listed = ", ".join(
                f"{o['dataset_type']} ({o['total']:,} samples)" if o.get("total") is not None else o["dataset_type"]
                for o in last.other_loaders
            )
            text += f"; the script also has {len(last.other_loaders)} other DataLoader(s), not checked: {listed}"
        elif sanity:
            text += "; Lightning builds the training loader after its sanity check, and it was not reached"
        for skip in self.skipped:
            text += f"; {skip['dataset_type']} could not be checked: {skip['message']}"
        return text + f". To check the next loader the script iterates: {self.next_loader_command()}"

    def next_loader_command(self) -> str:
        numbers = [scan.loader for scan in self.scans if scan.loader is not None]
        following = max(numbers) + 1 if numbers else 1
        return " ".join(["dlprobe scan --loader", str(following), self.script, *self.argv])

    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.died:
            return 2
        return 1 if self.bad_count else 0

    def to_json(self) -> dict[str, Any]:
        """Top-level fields sum up every loader (and are the loader's own when one was checked); `loaders` has each."""
        single = self.scans[0] if len(self.scans) == 1 else None
        unchecked = self.unchecked_note()
        return {
            "schema_version": SCHEMA_VERSION,
            "script": self.script,
            "argv": self.argv,
            "loader": self.loader,
            "loaders_checked": [scan.loader for scan in self.scans],
            "dataset_type": single.dataset_type if single else None,
            "iterable": single.iterable if single else False,
            "unit": self.unit,
            "total": single.total if single else None,
            "selection": self.selection,
            "selected": sum(scan.selected or 0 for scan in self.scans) if self.scans else None,
            "scanned": sum(scan.scanned for scan in self.scans),
            "complete": self.complete,
            "interrupted": self.interrupted,
            "only_some_loaders_checked": unchecked is not None,
            "unchecked_note": unchecked,
            "next_loader_command": self.next_loader_command() if unchecked else None,
            "loaders": [scan.to_json() for scan in self.scans],
            "skipped_loaders": self.skipped,
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
