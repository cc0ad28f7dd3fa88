"""samples.jsonl bounded for a run of any length: past its first hour, the sampler's readings are downsampled.

Every reading of the first FULL_RATE_READINGS is written (start-up, the first epoch's copy-on-write growth: what
the memory findings fit). After that the readings are taken as often as before but written per window of
THIN_WINDOW: only the ones holding one of the window's extremes (the tree's highest and lowest RSS, the highest
/dev/shm use and cgroup usage, the least available memory), and every one holding a process's smaps_rollup read
that moved its USS by SETTLED_BYTES or more since the last one written (a still process's repeated reads go). A
window in which a process ended is written whole, before the record of its end: the readings before a death are
its evidence. What is written is what was read, at the time it was read: nothing is averaged or moved.
"""

from __future__ import annotations

from typing import Any

FULL_RATE_READINGS = 14_400  # one hour at the sampler's 0.25 s tick
THIN_WINDOW = 20  # five seconds of ticks, written as the two to four readings that hold its extremes
SETTLED_BYTES = 4 * 1024 * 1024  # a smaps_rollup read that moved the USS less is a repeat (sampler.SETTLED_BYTES)


def _tree_rss(row: dict[str, Any]) -> int:
    return sum(int(v.get("rss") or 0) for v in (row.get("p") or {}).values())


def _nested(row: dict[str, Any], key: str, field: str) -> int:
    return int((row.get(key) or {}).get(field) or 0)


class ReadingThinner:
    """Readings in, the readings to write out (in time order)."""

    def __init__(self, full_rate: int = FULL_RATE_READINGS, window: int = THIN_WINDOW) -> None:
        self.full_rate = full_rate
        self.window = window
        self.seen = 0
        self.buffer: list[dict[str, Any]] = []
        self.keep_whole = False  # a process ended in this window
        self.last_uss: dict[str, int] = {}  # each process's USS as last written

    def add(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        self.seen += 1
        if self.seen <= self.full_rate:
            self._note_written(row)
            return [row]
        self.buffer.append(row)
        return self.flush() if len(self.buffer) >= self.window else []

    def process_ended(self) -> list[dict[str, Any]]:
        """A process ended: the window so far, whole, to write before its end (and the rest of the window whole)."""
        self.keep_whole = True
        return self.rest()

    def rest(self) -> list[dict[str, Any]]:
        """The window held so far, whole (the run's last readings, or a death's)."""
        rows, self.buffer = self.buffer, []
        for row in rows:
            self._note_written(row)
        return rows

    def flush(self) -> list[dict[str, Any]]:
        """The buffered window's readings to write (all of them after a death, else its extremes and moves)."""
        rows, self.buffer = self.buffer, []
        if self.keep_whole or not rows:
            self.keep_whole = False
            for row in rows:
                self._note_written(row)
            return rows
        keep = {
            id(max(rows, key=_tree_rss)),
            id(min(rows, key=_tree_rss)),
            id(max(rows, key=lambda r: _nested(r, "shm", "used"))),
            id(max(rows, key=lambda r: _nested(r, "cg", "usage"))),
            id(min(rows, key=lambda r: int(r.get("avail") or 0))),
        }
        kept = []
        for row in rows:  # in time order: each kept reading's USS is noted before the next one is weighed
            if id(row) in keep:
                self._note_written(row)
                kept.append(row)
            elif self._moved(row):
                kept.append(row)
        return kept

    def _moved(self, row: dict[str, Any]) -> bool:
        """Whether a process's USS in this reading moved from the last one written (noted if so)."""
        moved = False
        for pid, values in (row.get("p") or {}).items():
            uss = values.get("uss")
            if isinstance(uss, int) and abs(uss - self.last_uss.get(pid, -(1 << 62))) >= SETTLED_BYTES:
                moved = True
                self.last_uss[pid] = uss
        return moved

    def _note_written(self, row: dict[str, Any]) -> None:
        for pid, values in (row.get("p") or {}).items():
            if isinstance(values.get("uss"), int):
                self.last_uss[pid] = values["uss"]
