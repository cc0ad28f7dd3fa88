"""The terminal view of `dlprobe cache list`: one row per cached array, and how full its tmpfs is."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dlprobe.units import format_bytes


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _pids(pids: list[int]) -> str:
    if not pids:
        return "-"
    shown = ", ".join(str(p) for p in pids[:6])
    return shown + (f" +{len(pids) - 6} more" if len(pids) > 6 else "")


def cache_summary(result: dict[str, Any]) -> RenderableType:
    """result: {"dir", "free_bytes", "total_bytes", "entries": [{"key", "nbytes", "dtype", "shape", "age_s",
    "pids"}]}."""
    where = (
        f"{result['dir']}: {format_bytes(result.get('free_bytes'))} free of {format_bytes(result.get('total_bytes'))}"
    )
    entries = result["entries"]
    if not entries:
        return Text(f"No cached arrays in {where}.")
    table = Table()
    for col in ("key", "size", "array", "age", "mapped by"):
        table.add_column(col, justify="right" if col in ("size", "age") else "left", no_wrap=col != "mapped by")
    for e in entries:
        shape = "x".join(str(d) for d in e["shape"]) or "scalar"
        table.add_row(e["key"], format_bytes(e["nbytes"]), f"{e['dtype']} {shape}", _age(e["age_s"]),
                      _pids(e["pids"]))  # fmt: skip
    total = sum(e["nbytes"] for e in entries)
    mapped = sum(1 for e in entries if e["pids"])
    return Group(
        Text(f"Cached arrays in {where}"),
        table,
        Text(f"{len(entries)} arrays, {format_bytes(total)}; {mapped} mapped by running processes."),
    )
