"""Reads the stacks that `py-spy record --format raw --subprocesses` saved: (pid, frames, count) per line."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from dlprobe.rundir.schema import STACKS_FILE, STACKS_META_FILE

_PROCESS = re.compile(r"^process (\d+):")


@dataclass
class StackCount:
    pid: int
    frames: list[str]  # outermost first, each "function (file:line)"
    count: int


@dataclass
class StackProfile:
    rate: int | None = None
    error: str | None = None
    status: str | None = None  # schema.SAMPLER_*; None in runs written before stacks.json had it
    stacks: list[StackCount] = field(default_factory=list)


def parse_stacks(text: str) -> list[StackCount]:
    """One StackCount per line; the innermost `process PID:` prefix names the process that was sampled."""
    out = []
    for line in text.splitlines():
        body, _, count = line.rpartition(" ")
        if not body or not count.isdigit():
            continue
        pid = None
        frames = []
        for part in body.split(";"):
            match = _PROCESS.match(part)
            if match:
                pid = int(match.group(1))
            else:
                frames.append(part)
        if pid is not None:
            out.append(StackCount(pid, frames, int(count)))
    return out


def load_stacks(run_dir: Path) -> StackProfile | None:
    """The run's stack profile, or None when the run had no sampler (an older run, or none was started)."""
    meta_path = run_dir / STACKS_META_FILE
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = {}
    profile = StackProfile(meta.get("rate"), meta.get("error"), meta.get("status"))
    try:
        profile.stacks = parse_stacks((run_dir / STACKS_FILE).read_text(errors="replace"))
    except OSError:
        pass
    return profile
