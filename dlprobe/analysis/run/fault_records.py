"""Workers' fatal-signal records (faults/PID.txt, faulthandler's text): the signal each died of and its Python stack."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dlprobe import atomic
from dlprobe.rundir.files import ReadProblems, run_subdir
from dlprobe.rundir.handle import RunDir, faults_ref

# faulthandler's first line names the signal with the same strsignal() text torch uses ("Segmentation fault").
_FATAL = re.compile(r"^Fatal Python error: (?P<signal>[^\n]+?)\s*$", re.MULTILINE)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)', re.MULTILINE)
MAX_RECORD_BYTES = 64 * 1024  # a record is a few KiB; more is not faulthandler's


@dataclass
class FaultRecord:
    """How one worker died, in its own words: the signal and its stack, innermost frame first."""

    pid: int
    signal: str  # strsignal() text: "Segmentation fault", "Bus error", "Aborted", ...
    frames: list[str] = field(default_factory=list)  # "func (path:line)"


def parse_fault(pid: int, text: str) -> FaultRecord | None:
    """The record in faulthandler's text, or None when it holds none (a worker that did not crash)."""
    fatal = _FATAL.search(text)
    if fatal is None:
        return None
    frames = [f"{m['func']} ({m['file']}:{m['line']})" for m in _FRAME.finditer(text, fatal.end())]
    return FaultRecord(pid, fatal["signal"], frames)


def read_fault_records(run_path: Path, problems: ReadProblems) -> dict[int, FaultRecord]:
    """Every worker's record that says it crashed, by pid; an unreadable one is listed in `problems`."""
    records: dict[int, FaultRecord] = {}
    folder = run_subdir(RunDir(run_path).faults_dir, problems)
    for path in sorted(RunDir.fault_records_in(folder) if folder else []):
        if not path.stem.isdigit():
            continue
        try:
            with atomic.open_read(path) as f:
                text = f.read(MAX_RECORD_BYTES).decode(errors="replace")
        except OSError as exc:
            problems.add(faults_ref(path.name), f"unreadable ({exc.strerror or exc})")
            continue
        record = parse_fault(int(path.stem), text)
        if record is not None:
            records[record.pid] = record
    return records
