"""The run directory: where `dlprobe run` records a run and where every report reads it back."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from dlprobe.atomic import write_text_atomic
from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import EVENTS_FILE, META_FILE, RUN_SCHEMA_VERSION, SAMPLES_FILE, run_schema_version

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
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


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
        except ValueError:  # noqa: S112 - a torn line (killed writer); read_checked_jsonl counts them
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


class ReadProblems:
    """What a reader of a saved run directory could not use, per file: a file missing or unreadable, lines that are
    no JSON object (torn by a killed writer, garbage), records of the wrong shape. The report lists them."""

    def __init__(self) -> None:
        self.by_file: dict[str, list[str]] = {}

    def add(self, name: str, problem: str) -> None:
        self.by_file.setdefault(name, []).append(problem)

    def lines(self) -> list[dict[str, str]]:
        """One {"file", "problem"} per file, its problems joined."""
        return [{"file": name, "problem": "; ".join(problems)} for name, problems in self.by_file.items()]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def read_checked_jsonl(
    path: Path, problem_of: Callable[[Any], str | None], problems: ReadProblems, required: bool = True
) -> list[dict[str, Any]]:
    """The records of a JSON-lines file that `problem_of` accepts; lines that are no JSON object and records it
    rejects are skipped and counted in `problems` (with the first reason), as is a missing file when `required`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if required:
            problems.add(path.name, "missing")
        return []
    except OSError as exc:
        problems.add(path.name, f"unreadable ({exc.strerror or exc})")
        return []
    records: list[dict[str, Any]] = []
    torn = 0
    rejected: list[str] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            torn += 1
            continue
        reason = problem_of(record)
        if reason is None:
            records.append(record)
        else:
            rejected.append(reason)
    if torn:
        cut = " (the last one cut short)" if not data.endswith(b"\n") else ""
        problems.add(path.name, f"{_plural(torn, 'line')} not JSON skipped{cut}")
    if rejected:
        problems.add(path.name, f"{_plural(len(rejected), 'record')} of the wrong shape skipped (first: {rejected[0]})")
    return records


def read_checked_json(
    path: Path, problem_of_field: Callable[[str, Any], str | None], problems: ReadProblems, required: bool = True
) -> dict[str, Any]:
    """A JSON object file, {} where it is missing, cut short or not an object; fields that `problem_of_field`
    rejects are dropped. Each of these is noted in `problems`."""
    try:
        record = json.loads(path.read_bytes())
    except FileNotFoundError:
        if required:
            problems.add(path.name, "missing")
        return {}
    except OSError as exc:
        problems.add(path.name, f"unreadable ({exc.strerror or exc})")
        return {}
    except ValueError:
        problems.add(path.name, "not JSON (cut short?)")
        return {}
    if not isinstance(record, dict):
        problems.add(path.name, f"a JSON {type(record).__name__}, not an object")
        return {}
    bad = {key: reason for key, value in record.items() if (reason := problem_of_field(key, value)) is not None}
    if bad:
        problems.add(path.name, "fields of the wrong type ignored: " + ", ".join(bad.values()))
    return {key: value for key, value in record.items() if key not in bad}


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


def _has_record(path: Path) -> bool:
    """Whether a JSON-lines file holds at least one JSON object (read up to the first one)."""
    return next(read_jsonl(path), None) is not None


def open_run_dir(path: str) -> Path:
    """Check that a path is a saved run directory: one with any of the files `dlprobe run` writes first. A damaged
    meta.json is load_run's to report (the rest of the directory still has a report); no run file at all is an error.
    """
    run = Path(path)
    if not run.is_dir():
        raise DlprobeError(f"no such run directory: {path}", hint="pass a directory made by `dlprobe run`")
    if not any((run / name).is_file() for name in (META_FILE, EVENTS_FILE, SAMPLES_FILE)):
        raise DlprobeError(
            f"{path} is not a dlprobe run directory (no {META_FILE}, {EVENTS_FILE} or {SAMPLES_FILE})",
            hint="pass a directory made by `dlprobe run`, e.g. one under ./dlprobe-runs/",
        )
    try:
        meta = read_json(run / META_FILE)
    except (OSError, ValueError):
        meta = {}  # missing or cut short: load_run says so in the report
    if not (isinstance(meta, dict) and meta) and not any(_has_record(run / n) for n in (EVENTS_FILE, SAMPLES_FILE)):
        raise DlprobeError(
            f"nothing in {path} can be read: {META_FILE} is damaged or missing and {EVENTS_FILE} and "
            f"{SAMPLES_FILE} hold no readable line",
            hint="the run directory is damaged beyond use; copy it again from where it was recorded, or record the run "
            "again",
        )
    # Older runs (no schema_version) read fine; a newer one may mean what this dlprobe cannot know.
    version = run_schema_version(meta if isinstance(meta, dict) else {})
    if version > RUN_SCHEMA_VERSION:
        raise DlprobeError(
            f"{path} was recorded by a newer dlprobe "
            f"(run format {version}; this dlprobe reads up to {RUN_SCHEMA_VERSION})",
            hint="upgrade dlprobe (pip install -U dlprobe) to read this run",
        )
    return run


__all__ = [
    "DEFAULT_ROOT",
    "JsonlTail",
    "ReadProblems",
    "create_run_dir",
    "open_run_dir",
    "read_checked_json",
    "read_checked_jsonl",
    "read_json",
    "read_jsonl",
    "write_json",
    "write_json_option",
]
