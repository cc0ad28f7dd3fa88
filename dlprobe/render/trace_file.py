"""Writes trace.json (analysis/trace.py's dict) compactly, one event per line; a failure costs the trace only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dlprobe.analysis.model import RunData
from dlprobe.analysis.trace import build_trace


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    """One event per line: a few MB stays readable with grep and diffs, without indent's bulk."""
    events = trace.get("traceEvents") or []
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    compact = {"separators": (",", ":"), "default": str}
    lines = ",\n".join(json.dumps(e, **compact) for e in events)  # type: ignore[arg-type]
    text = json.dumps(head, **compact)[:-1] + ',"traceEvents":[\n' + lines + "\n]}\n"  # type: ignore[arg-type]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def trace_problem(path: Path, runs: list[RunData], report: dict[str, Any]) -> list[str]:
    """Build and write the trace; what went wrong, for the terminal (the report is already written)."""
    try:
        write_trace(path, build_trace(runs, report))
    except Exception as exc:  # the trace is a view: never lose the report, the page or the exit code for it
        return [f"could not write {path.name}: {type(exc).__name__}: {exc}"]
    return []
