"""The run directory: where `dlprobe run` records a run and where every report reads it back."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dlprobe.errors import DlprobeError

META_FILE = "meta.json"
EVENTS_FILE = "events.jsonl"  # written by the hooks in the training process
SAMPLES_FILE = "samples.jsonl"
RESULT_FILE = "result.json"
REPORT_FILE = "report.json"
PLOT_FILE = "memory.png"
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
STACKS_FILE = "stacks.txt"  # py-spy's raw (collapsed) format: one line per distinct stack, with its count
STACKS_META_FILE = "stacks.json"
DEFAULT_ROOT = "dlprobe-runs"


def create_run_dir(out: str | None, script: str) -> Path:
    """Make a fresh run directory (`--out` or ./dlprobe-runs/<script>-<time>) or explain why not."""
    if out:
        path = Path(out)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(DEFAULT_ROOT) / f"{Path(script).stem}-{stamp}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = Path(DEFAULT_ROOT) / f"{Path(script).stem}-{stamp}-{suffix}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe_file = path / ".write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as exc:
        raise DlprobeError(
            f"cannot write the run directory {path}: {exc.strerror or exc}",
            hint="pass --out DIR with a directory you can write to",
        ) from None
    if (path / META_FILE).exists():
        raise DlprobeError(
            f"{path} already holds a dlprobe run",
            hint="pass a new --out directory, or remove the old run first",
        )
    return path


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def write_json_option(json_path: str, data: Any, hint: str) -> None:
    """Write a `--json PATH` copy; an unwritable path is the user's to fix, so it becomes a DlprobeError."""
    try:
        write_json(Path(json_path), data)
    except OSError as exc:
        raise DlprobeError(f"cannot write --json {json_path}: {exc.strerror or exc}", hint=hint) from None


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _records(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects among lines; a torn line (its writer was killed mid-write) is skipped."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file."""
    try:
        f = path.open("rb")
    except OSError:
        return
    with f:
        yield from _records(f)


class JsonlTail:
    """Reads the complete lines appended to a JSON-lines file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()
        return list(_records(lines))


def open_run_dir(path: str) -> Path:
    """Check that a path is a saved run directory."""
    run = Path(path)
    if not run.is_dir():
        raise DlprobeError(f"no such run directory: {path}", hint="pass a directory made by `dlprobe run`")
    if not (run / META_FILE).exists():
        raise DlprobeError(
            f"{path} is not a dlprobe run directory (no {META_FILE})",
            hint="pass a directory made by `dlprobe run`, e.g. one under ./dlprobe-runs/",
        )
    return run


__all__ = [
    "EVENTS_FILE",
    "META_FILE",
    "PLOT_FILE",
    "REPORT_FILE",
    "RESULT_FILE",
    "SAMPLES_FILE",
    "STACKS_FILE",
    "STACKS_META_FILE",
    "STDERR_FILE",
    "STDOUT_FILE",
    "JsonlTail",
    "create_run_dir",
    "open_run_dir",
    "read_json",
    "read_jsonl",
    "write_json",
]
