"""Damaged copies of real run directories, the ways real ones get damaged: cut at a byte (a job killed mid-write,
a copy interrupted), a field of another JSON type, a file gone, garbage lines. Used by the unit tests (hypothesis,
in-process) and the integration tests (real `dlprobe report` subprocesses)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "rundirs"
# Real run directories recorded by `dlprobe run` (startup_profile events and most of stacks.txt cut for size):
# one script with 2 workers (cow-growth, input-bound, worker-hotspots) and a 2-rank torchrun job whose rank 1 exited 7.
SOURCES = ("leaky_list", "torchrun_rank_failed")
JSON_FILES = ("meta.json", "result.json", "kernel.json", "stacks.json")
JSONL_FILES = ("events.jsonl", "samples.jsonl")
KINDS = ("truncate", "retype", "drop", "garbage")
GARBAGE = (b"\x00\xff\xfe", b"not json at all", b"[1, 2, 3]", b'{"ev": ', b"null", b'"a string"', b"{}", b"42")


def other_values(rng: random.Random) -> Any:
    """A JSON value of any type, the odd ones included."""
    return rng.choice(
        [None, True, False, 0, -1, 2**40, 1.5, -0.0, "", "x", "12", [], [1, "a"], {}, {"a": 1}, [[{}]], {"pid": "1"}]
    )


def files_of(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


def _retype(path: Path, rng: random.Random) -> None:
    """Replace one field somewhere (top level or one level down) of one record by a value of another type."""
    text = path.read_text(errors="replace")
    if path.suffix == ".jsonl":
        lines = text.splitlines()
        if not lines:
            return
        at = rng.randrange(len(lines))
        try:
            record = json.loads(lines[at])
        except ValueError:
            return
        lines[at] = json.dumps(_retyped(record, rng))
        path.write_text("\n".join(lines) + "\n")
        return
    try:
        record = json.loads(text)
    except ValueError:
        return
    path.write_text(json.dumps(_retyped(record, rng)))


def _retyped(record: Any, rng: random.Random) -> Any:
    if isinstance(record, dict) and record:
        key = rng.choice(sorted(record))
        inner = record[key]
        if isinstance(inner, (dict, list)) and inner and rng.random() < 0.5:
            record[key] = _retyped(inner, rng)
        else:
            record[key] = other_values(rng)
        return record
    if isinstance(record, list) and record:
        at = rng.randrange(len(record))
        record[at] = _retyped(record[at], rng) if rng.random() < 0.5 else other_values(rng)
        return record
    return other_values(rng)


def damage(run_dir: Path, rng: random.Random, kind: str) -> str:
    """One damage of `kind` to one file of the directory; returns what was done, for the failure message."""
    files = [p for p in files_of(run_dir) if p.name != "report.json"]
    if not files:
        return "nothing left to damage"
    if kind == "retype":
        candidates = [p for p in files if p.name in JSON_FILES or p.name in JSONL_FILES]
        path = rng.choice(candidates or files)
        _retype(path, rng)
        return f"retyped a field of {path.name}"
    path = rng.choice(files)
    if kind == "drop":
        path.unlink()
        return f"dropped {path.name}"
    data = path.read_bytes()
    if kind == "truncate":
        cut = rng.randrange(len(data) + 1) if data else 0
        path.write_bytes(data[:cut])
        return f"cut {path.name} at byte {cut} of {len(data)}"
    lines = data.split(b"\n")
    at = rng.randrange(len(lines) + 1)
    lines[at:at] = [rng.choice(GARBAGE) for _ in range(rng.randint(1, 3))]
    path.write_bytes(b"\n".join(lines))
    return f"garbage lines in {path.name} at line {at}"


def damaged_copy(dest: Path, seed: int, damages: int = 2) -> tuple[Path, list[str]]:
    """A copy of one of SOURCES under dest with `damages` random damages (chosen by seed)."""
    rng = random.Random(seed)
    source = rng.choice(SOURCES)
    run_dir = dest / f"{source}-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(FIXTURES / source, run_dir)
    done = [damage(run_dir, rng, rng.choice(KINDS)) for _ in range(damages)]
    return run_dir, [f"{source} seed {seed}", *done]
