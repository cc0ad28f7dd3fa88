"""PyTorch's DataLoader failure messages (catalogue S1-S21 and friends) as patterns over one log line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlprobe.torch_text import (
    CAUGHT_IN_PIN_THREAD,
    CAUGHT_IN_WORKER,
    EMFILE_OSERROR,
    MAIN_OUT_OF_DESCRIPTORS,
    SHM_ALLOCATE_FAILED,
    WORKER_EXIT_CODE,
    WORKER_KILLED,
    WORKERS_EXITED,
)

# Severity of what a message means on its own: a failure ends the run; a warning or hint explains one.
FAILURE, WARNING, HINT = "failure", "warning", "hint"


@dataclass(frozen=True)
class Pattern:
    id: str
    regex: re.Pattern[str]
    kind: str
    # Only count the message when it ends a traceback that went through torch.utils.data (the text alone
    # is too generic, e.g. torch.stack's shape error).
    needs_loader_frames: bool = False


@dataclass
class Match:
    """One recognised message: which pattern, on which line of the log, and the values it names."""

    id: str
    line: int
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "line": self.line, "text": self.text, "fields": self.fields}


def _p(id_: str, regex: str, kind: str = FAILURE, needs_loader_frames: bool = False) -> Pattern:
    return Pattern(id_, re.compile(regex), kind, needs_loader_frames)


PATTERNS: tuple[Pattern, ...] = (
    _p("S1", WORKER_KILLED.pattern),
    _p("S2", WORKER_EXIT_CODE.pattern),
    _p("S3", WORKERS_EXITED.pattern),
    _p("S4", r"DataLoader timed out after (?P<timeout>\d+(?:\.\d+)?) seconds"),
    _p("S5", r"Pin memory thread exited unexpectedly"),
    _p("S6", MAIN_OUT_OF_DESCRIPTORS),
    _p("S7", r"received 0 items of ancdata"),
    _p(
        "S8", r"ERROR: Unexpected (?P<what>bus error|segmentation fault|floating-point exception) encountered in worker"
    ),
    _p("S9", CAUGHT_IN_WORKER.pattern),
    _p("S10", CAUGHT_IN_PIN_THREAD.pattern),
    _p(
        "S11",
        r"This DataLoader will create (?P<workers>\d+) worker processes in total\. "
        r"(?:Our suggested max number of worker in current system is (?P<suggested>\d+)"
        r"|DataLoader is not able to compute a suggested max number of worker)",
        WARNING,
    ),
    _p(
        "S12",
        r"Length of IterableDataset .* was reported to be (?P<reported>\d+) ?\(when accessing len\(dataloader\)\), "
        r"but (?P<fetched>\d+) samples have been fetched",
        WARNING,
    ),
    _p(
        "S14",
        r"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found (?P<found>.+)",
    ),
    _p("S15", r"each element in list of batch should be of equal size"),
    _p(
        "S16",
        r"stack expects each tensor to be equal size, but got (?P<first>\[[^\]]*\]) at entry 0 "
        r"and (?P<other>\[[^\]]*\]) at entry (?P<entry>\d+)",
        needs_loader_frames=True,
    ),
    _p("S17", r"Trying to resize storage that is not resizable"),
    _p("S18", r"Cannot re-initialize CUDA in forked subprocess"),
    _p("S19", SHM_ALLOCATE_FAILED.pattern),
    _p(
        "S20",
        r"unable to (?:write to file|open shared memory object|resize file|mmap \d+ bytes from file) <(?P<file>[^>]*)>"
        r"(?P<error>.*)",
    ),
    _p(
        "S21",
        r"(?P<option>prefetch_factor) option could only be specified in multiprocessing"
        r"|(?P<option2>persistent_workers) option needs num_workers > 0",
    ),
    # Not from torch, but how the same failures often show up in a log.
    _p("errno24", EMFILE_OSERROR.pattern),
    _p("none-sample", r"'NoneType' object has no attribute 'numel'", needs_loader_frames=True),
    _p(
        "pickle",
        # Python 3.13 words pickle's refusal of a lambda or local class "Can't get local object"
        r"Can't (?:pickle|get) local object|Can't get attribute '[^']+' on <module '__main__'"
        r"|cannot pickle '[^']+' object|Got pickle error when attempting to start a worker Process",
        needs_loader_frames=True,
    ),
    _p("kernel-oom", r"Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"),
    # A shell reports its child killed by SIGKILL as a bare "Killed"; launchers say exit code -9.
    _p(
        "main-killed",
        r"^(?:\S+: line \d+: +(?P<pid>\d+) )?Killed(?: {2,}\S.*)?$"
        r"|exitcode\s*:\s*-9\b|terminated with (?:exit )?code -9",
    ),
    _p(
        "tokenizers-fork",
        r"huggingface/tokenizers: The current process just got forked, after parallelism has already been used",
        HINT,
    ),
    _p(
        "fork-threads",
        r"This process \(pid=(?P<pid>\d+)\) is multi-threaded, use of fork\(\) may lead to deadlocks",
        HINT,
    ),
    _p(
        "native-abort",
        r"terminate called after throwing|double free or corruption|free\(\): invalid|malloc\(\): corrupted"
        r"|Assertion `[^`]*' failed|corrupted size vs\. prev_size",
        HINT,
    ),
)

BY_ID = {p.id: p for p in PATTERNS}

# Substrings of every line a pattern can match outside a traceback, and the start of every traceback (inside
# one each line is read anyway): a chunk of the log without any of them is skipped at C speed. Each costs a pass
# over the log, so keep them few; a unit test checks that the sample of each pattern passes the gate.
KEYWORDS: tuple[bytes, ...] = (
    b"Traceback",
    b"DataLoader",
    b"IterableDataset",
    b"ERROR: Unexpected",
    b"Killed",
    b"exitcode",
    b"code -9",
    b"tokenizers",
    b"use of fork",
    b"shared memory",
    b"Too many open files",
    b"terminate called",
    b"corrupt",
    b"Assertion `",
    b"(): ",
    b"Root Cause",  # torchrun's summary: the block that names the rank that failed first
    b"local_rank",
)

# A Python exception line, the last line of a traceback: `pkg.Error: message` or a bare `Error`.
EXCEPTION_LINE = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?:: ?(?P<message>.*))?")
SIGNAL_NUMBERS = {
    "Killed": 9,
    "Bus error": 7,
    "Segmentation fault": 11,
    "Aborted": 6,
    "Floating point exception": 8,
    "Terminated": 15,
    "Interrupt": 2,
    "Hangup": 1,
    "Illegal instruction": 4,
    "Trace/breakpoint trap": 5,
    "User defined signal 1": 10,
    "User defined signal 2": 12,
}


def has_keyword(data: bytes) -> bool:
    return any(word in data for word in KEYWORDS)


def _fields(pattern: Pattern, m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in m.groupdict().items():
        if value is None:
            continue
        if key in ("pid", "exit_code", "worker_id", "device", "workers", "suggested", "reported", "fetched", "entry"):
            out[key] = int(value)
        elif key == "timeout":
            out[key] = float(value)
        elif key == "pids":
            out[key] = [int(p) for p in value.split(",")]
        elif key == "option2":
            out["option"] = value
        else:
            out[key] = value.strip()
    if pattern.id == "S1":
        out["signal_number"] = SIGNAL_NUMBERS.get(out["signal"])
    return out


def match_line(text: str, line: int = 0) -> list[Match]:
    """Every pattern that matches this line (already decoded, without its line break), with its fields."""
    found = []
    for pattern in PATTERNS:
        m = pattern.regex.search(text)
        if m is not None:
            found.append(Match(pattern.id, line, text, _fields(pattern, m)))
    return found


def exception_line(text: str) -> tuple[str, str] | None:
    """(type, message) when the line reads like the last line of a Python traceback."""
    m = EXCEPTION_LINE.fullmatch(text.rstrip())
    if m is None:
        return None
    exc_type = m.group("type")
    # `ERROR: ...` from torch's C signal handler or a logger is not an exception line.
    if exc_type.isupper() and "." not in exc_type:
        return None
    return exc_type, (m.group("message") or "")
