"""Writes trace.json and stacks.speedscope.json compactly; a failure costs that file only, never the report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlprobe.atomic import write_text_atomic


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    """One event per line: a few MB stays readable with grep and diffs, without indent's bulk."""
    events = trace.get("traceEvents") or []
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    # One encoder for every event: json.dumps with options builds a new one per call, which was half of the time
    # `dlprobe run` spent on this file after the script had exited.
    encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
    lines = ",\n".join(map(encode, events))
    write_text_atomic(path, encode(head)[:-1] + ',"traceEvents":[\n' + lines + "\n]}\n")


def trace_problem(path: Path, build: Callable[[], dict[str, Any]]) -> list[str]:
    """Build the trace (`analysis.report.trace:build_trace`, bound by the caller) and write it; what went wrong, for the
    terminal (the report is already written)."""
    try:
        write_trace(path, build())
    except Exception as exc:  # the trace is a view: never lose the report, the page or the exit code for it
        return [f"could not write {path.name}: {type(exc).__name__}: {exc}"]
    return []


def speedscope_problem(path: Path, build: Callable[[], dict[str, Any] | None]) -> list[str]:
    """The sampled stacks for speedscope.app (`analysis.report.speedscope:build_speedscope`, bound by the caller), where
    the run has any; what went wrong, for the terminal."""
    try:
        profile = build()
        if profile is not None:
            write_text_atomic(path, json.dumps(profile, separators=(",", ":")))
    except Exception as exc:  # a view of stacks.txt, which stays
        return [f"could not write {path.name}: {type(exc).__name__}: {exc}"]
    return []
