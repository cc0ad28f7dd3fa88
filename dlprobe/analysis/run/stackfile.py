"""Reads the stacks that `py-spy record --format raw --subprocesses` saved: (pid, frames, count) per line."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from dlprobe import atomic
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import SAMPLER_OK, STACKS_META_FILE

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
    read_problem: str | None = None  # why stacks.txt or stacks.json could not be read, where one could not


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
    """The run's stack profile, or None when the run had no sampler (an older run, or none was started); a file that
    could not be read is named in `read_problem`, so an empty hotspot section says why."""
    files = RunDir(run_dir)
    meta_path = files.stacks_meta
    if not meta_path.exists():
        return None
    problem = None
    try:
        meta = json.loads(atomic.read_bytes(meta_path))
    except (OSError, ValueError) as exc:
        meta, problem = {}, f"{STACKS_META_FILE} unreadable ({type(exc).__name__})"
    if not isinstance(meta, dict):
        meta, problem = {}, f"{STACKS_META_FILE} is no JSON object"
    rate, error, status = meta.get("rate"), meta.get("error"), meta.get("status")
    profile = StackProfile(
        rate if isinstance(rate, int) and not isinstance(rate, bool) else None,
        error if isinstance(error, str) else None,
        status if isinstance(status, str) else None,
    )
    try:
        profile.stacks = parse_stacks(atomic.read_text(files.stacks, errors="replace"))
    except FileNotFoundError:
        if profile.status == SAMPLER_OK:  # a sampler that failed or never ran saves no stacks: nothing is missing
            problem = "missing, though the sampler recorded stacks"
    except OSError as exc:
        problem = f"unreadable ({exc.strerror or exc})"
    profile.read_problem = problem
    return profile
