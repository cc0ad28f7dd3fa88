"""The run directory: where `dlprobe run` records a run and where every report reads it back."""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from dlprobe import atomic
from dlprobe.atomic import write_text_atomic
from dlprobe.errors import DlprobeError
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import EVENTS_FILE, META_FILE, RUN_SCHEMA_VERSION, SAMPLES_FILE, run_schema_version

DEFAULT_ROOT = "dlprobe-runs"


def create_run_dir(out: str | None, script: str, claim: bool = True) -> Path:
    """Make a fresh run directory (`--out` or ./dlprobe-runs/<script>-<time>) or explain why not.

    The directory is made by one `mkdir` (never `exist_ok`): runs started in the same second and folder (a job
    array) each get their own, the next one `-2`, `-3`, ... It is private to the user (0700): the script's output,
    command line and environment facts land in it. An existing `--out` is used when it is the user's own and no one
    else may write to it. With `claim`, events.jsonl is created in it exclusively, so two runs given one `--out` at
    once never share it either (the second is told the directory holds a run)."""
    try:
        if out:
            path = Path(out)
            _make_parent(path.parent)
            try:
                path.mkdir(mode=0o700)
                os.chmod(path, 0o700)  # the umask may have taken bits away, never adds them: say it exactly
            except FileExistsError:
                check_own_dir(path, "--out")
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            root = Path(DEFAULT_ROOT)
            _make_parent(root)
            path = _make_unique(root, f"{Path(script).stem}-{stamp}")
        files = RunDir(path)
        try:
            if os.path.lexists(files.meta):
                raise FileExistsError(errno.EEXIST, "holds a run", str(files.meta))
            if claim:
                os.close(atomic.create_new_fd(files.events))
        except FileExistsError:
            raise DlprobeError(
                f"{path} already holds a dlprobe run",
                hint="pass a new --out directory, or remove the old run first",
            ) from None
        if not claim:
            os.close(atomic.create_fd(path / ".write-test"))
            os.unlink(path / ".write-test")
    except OSError as exc:
        raise DlprobeError(
            f"cannot write the run directory {out or DEFAULT_ROOT}: {exc.strerror or exc}",
            hint="pass --out DIR with a directory you can write to",
        ) from None
    return path


def _make_unique(root: Path, name: str) -> Path:
    """root/name, or root/name-2, -3, ...: the first that one `mkdir` creates (two runs never share one)."""
    for suffix in range(1, 10_000):
        path = root / (name if suffix == 1 else f"{name}-{suffix}")
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # noqa: S112 - another run took this name: the next suffix
            continue
        os.chmod(path, 0o700)
        return path
    raise OSError(errno.EMLINK, "10,000 run directories of this name and second already exist", str(root))


def _make_parent(parent: Path) -> None:
    """The folder the run directory goes in: made if missing; refused when someone else could move or replace
    the run directory in it (owned by another user, or writable by every user without the sticky bit that /tmp has;
    a group-writable project folder is the group's choice to share)."""
    parent.mkdir(parents=True, exist_ok=True)
    info = os.stat(parent)
    euid = os.geteuid()
    if info.st_uid not in (euid, 0):
        raise DlprobeError(
            f"{parent} belongs to another user (uid {info.st_uid}); a run directory in it could be replaced by them",
            hint="pass --out with a directory of your own, e.g. --out ~/dlprobe-runs/NAME",
        )
    if info.st_mode & 0o002 and not info.st_mode & stat.S_ISVTX:
        raise DlprobeError(
            f"{parent} is writable by every user without the sticky bit; anyone could replace the run directory in it",
            hint=f"pass --out with a directory of your own, or `chmod o-w {parent}` (or `chmod +t`)",
        )


def _who_writes(mode: int) -> str:
    return " and ".join(who for who, bit in (("its group", 0o020), ("every user", 0o002)) if mode & bit)


def check_own_dir(path: Path, what: str) -> None:
    """A directory dlprobe writes a run into must be the user's own and writable by no one else: whoever else can
    write there can plant a link under the name of a file dlprobe is about to write. One error line, exit 2."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise DlprobeError(
            f"cannot use {what} {path}: {exc.strerror or exc}", hint="pass a directory of your own"
        ) from None
    if stat.S_ISLNK(info.st_mode):
        info = os.stat(path)  # a link the user made to their own folder is theirs to make; the folder is checked
    if not stat.S_ISDIR(info.st_mode):
        raise DlprobeError(f"{what} {path} is not a directory", hint="pass a new directory name")
    if info.st_uid != os.geteuid():
        raise DlprobeError(
            f"{what} {path} belongs to another user (uid {info.st_uid}); dlprobe does not write a run into it",
            hint="pass a new directory of your own (dlprobe makes it private), or copy the run first",
        )
    if info.st_mode & 0o022:
        raise DlprobeError(
            f"{what} {path} is writable by {_who_writes(info.st_mode)}; a file planted there could redirect "
            f"what dlprobe writes",
            hint=f"`chmod go-w {path}`, or pass a new directory (dlprobe makes it private)",
        )


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_json_option(json_path: str, data: Any, hint: str) -> None:
    """Write a `--json PATH` copy; an unwritable path is the user's to fix, so it becomes a DlprobeError."""
    try:
        write_json(Path(json_path), data)
    except OSError as exc:
        raise DlprobeError(f"cannot write --json {json_path}: {exc.strerror or exc}", hint=hint) from None


def read_json(path: Path) -> Any:
    """A JSON file of a run directory (never through a link)."""
    return json.loads(atomic.read_bytes(path))


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
        f = atomic.open_read(path)
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


def run_subdir(path: Path, problems: ReadProblems) -> Path | None:
    """A folder of the run (RunDir(run).hangs_dir, ...) where it is a real folder; None where it is missing, or a link
    (named in `problems`: a link would lead the report out of the run directory, to files someone else chose)."""
    if atomic.real_subdir(path):
        return path
    if path.is_symlink():
        problems.add(f"{path.name}/", "a symbolic link, not followed")
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def read_checked_jsonl(
    path: Path, problem_of: Callable[[Any], str | None], problems: ReadProblems, required: bool = True
) -> list[dict[str, Any]]:
    """The records of a JSON-lines file that `problem_of` accepts; lines that are no JSON object and records it
    rejects are skipped and counted in `problems` (with the first reason), as is a missing file when `required`."""
    try:
        data = atomic.read_bytes(path)
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
        record = json.loads(atomic.read_bytes(path))
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
            with atomic.open_read(self.path) as f:
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
    run, files = Path(path), RunDir(path)
    if not run.is_dir():
        raise DlprobeError(f"no such run directory: {path}", hint="pass a directory made by `dlprobe run`")
    if not any(p.is_file() for p in (files.meta, files.events, files.samples)):
        raise DlprobeError(
            f"{path} is not a dlprobe run directory (no {META_FILE}, {EVENTS_FILE} or {SAMPLES_FILE})",
            hint="pass a directory made by `dlprobe run`, e.g. one under ./dlprobe-runs/",
        )
    try:
        meta = read_json(files.meta)
    except (OSError, ValueError):
        meta = {}  # missing or cut short: load_run says so in the report
    if not (isinstance(meta, dict) and meta) and not any(_has_record(p) for p in (files.events, files.samples)):
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
    "check_own_dir",
    "JsonlTail",
    "ReadProblems",
    "create_run_dir",
    "open_run_dir",
    "read_checked_json",
    "read_checked_jsonl",
    "run_subdir",
    "read_json",
    "read_jsonl",
    "write_json",
    "write_json_option",
]
