"""The hotspot sampler's stacks (stacks.txt) as a speedscope file: one sampled profile per process, named by role."""

from __future__ import annotations

import re
from typing import Any

from dlprobe import __version__
from dlprobe.analysis.run.labels import worker_track
from dlprobe.analysis.run.model import RunData

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")  # py-spy: "function (file:line)"


def _frame(text: str) -> dict[str, Any]:
    match = _FRAME.match(text)
    if not match:
        return {"name": text}
    frame: dict[str, Any] = {"name": match["name"], "file": match["file"]}
    if match["line"]:
        frame["line"] = int(match["line"])
    return frame


def _process_name(run: RunData, pid: int) -> str:
    proc = next((p for p in run.processes if p.pid == pid), None)
    if proc is not None and proc.role == "worker":
        return worker_track(proc.loader_id, proc.worker_id, pid)
    if proc is not None and proc.role == "main":
        return f"main (pid {pid})"
    return f"pid {pid}"


def build_speedscope(run: RunData) -> dict[str, Any] | None:
    """None when the run has no sampled stacks (no sampler, or it recorded nothing)."""
    if run.stacks is None or not run.stacks.stacks:
        return None
    frames: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    by_pid: dict[int, tuple[list[list[int]], list[int]]] = {}
    for stack in run.stacks.stacks:
        samples, weights = by_pid.setdefault(stack.pid, ([], []))
        ids = []
        for text in stack.frames:  # outermost first, as speedscope wants them
            if text not in index:
                index[text] = len(frames)
                frames.append(_frame(text))
            ids.append(index[text])
        samples.append(ids)
        weights.append(stack.count)
    rate = f" at {run.stacks.rate} Hz" if run.stacks.rate else ""
    profiles = []
    main_first = sorted(by_pid, key=lambda pid: (_process_name(run, pid).startswith("pid "), pid))
    for pid in main_first:
        samples, weights = by_pid[pid]
        # sample counts, not seconds: py-spy samples every thread, so a process's count can pass the run's length
        profiles.append(
            {"type": "sampled", "name": f"{_process_name(run, pid)}: {sum(weights)} samples{rate}", "unit": "none",
             "startValue": 0, "endValue": sum(weights), "samples": samples, "weights": weights}
        )  # fmt: skip
    return {
        "$schema": SCHEMA_URL,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": f"{run.meta.get('script') or 'run'}: py-spy stacks",
        "activeProfileIndex": 0,
        "exporter": f"dlprobe {__version__}",
    }
