"""Writes trace.json and stacks.speedscope.json compactly; a failure costs that file only, never the report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dlprobe.analysis.model import RunData
from dlprobe.analysis.speedscope import build_speedscope
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


def speedscope_problem(path: Path, run: RunData) -> list[str]:
    """The sampled stacks for speedscope.app, where the run has any; what went wrong, for the terminal."""
    try:
        profile = build_speedscope(run)
        if profile is not None:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(profile, separators=(",", ":")))
            os.replace(tmp, path)
    except Exception as exc:  # a view of stacks.txt, which stays
        return [f"could not write {path.name}: {type(exc).__name__}: {exc}"]
    return []
