"""Streams a log of any size (text, binary junk, NUL bytes, gzip) and keeps only what triage needs, bounded."""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import IO, Any, cast

from dlprobe.frames import is_user_file
from dlprobe.triage.patterns import BY_ID, Match, exception_line, has_keyword, match_line

CHUNK_SIZE = 1 << 20
# A "line" longer than this is cut: progress bars and binary junk must not make memory grow with the file.
MAX_SEGMENT = 1 << 16
MAX_TEXT = 2000  # characters kept of a matched line or an exception message
MAX_RECENT_MATCHES = 300
MAX_TRACEBACKS = 20
FIRST_FRAMES, LAST_FRAMES = 3, 12
MAX_NOISE_IN_TRACEBACK = 5  # lines from other processes interleaved into a traceback before we give up on it
SAMPLE_BYTES = 1 << 16  # the head of the file that decides "binary or text"
BINARY_RATIO = 0.05

# \n ends a line; \r (progress bars) and \0 (torch's worker crash messages end in one) end a segment.
SEPARATORS = re.compile(rb"[\n\r\x00]")
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# torchrun and friends prefix every line of a rank: "[rank0]: ", "[default0]:".
RANK_PREFIX = re.compile(r"^\[(?:rank\s*(?P<rank>\d+)|default\d+)\]:\s?", re.IGNORECASE)
# torchrun's failure summary names the rank that failed first: "Root Cause (first observed failure):", then the
# failure's fields, among them "  rank      : 1 (local_rank: 1)".
ROOT_CAUSE = "Root Cause (first observed failure)"
ROOT_CAUSE_RANK = re.compile(r"\s*rank\s*:\s*(?P<rank>\d+)(?:\s*\(local_rank:\s*(?P<local>\d+)\))?")
FRAME = re.compile(r'\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)')
TRACEBACK_START = "Traceback (most recent call last):"
CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\x0c\x1b") + b"\x7f"
LOADER_PATH = "torch/utils/data/"


@dataclass
class Frame:
    file: str
    line: int
    func: str

    @property
    def is_library(self) -> bool:
        return not is_user_file(self.file)


@dataclass
class TracebackBlock:
    """One `Traceback (most recent call last):` (or a worker's `Original Traceback`) and its exception line."""

    start_line: int
    original: bool
    frames: list[Frame] = field(default_factory=list)
    frames_total: int = 0
    through_loader: bool = False
    exception: str | None = None
    message: str | None = None
    end_line: int | None = None
    rank: int | None = None  # from the "[rankN]:" prefix of its first line

    def add_frame(self, frame: Frame) -> None:
        self.frames_total += 1
        self.through_loader = self.through_loader or LOADER_PATH in frame.file
        if len(self.frames) >= FIRST_FRAMES + LAST_FRAMES:
            del self.frames[FIRST_FRAMES]
        self.frames.append(frame)

    def user_frame(self) -> Frame | None:
        """The innermost frame outside Python's and installed libraries' code: usually the user's bug."""
        return next((f for f in reversed(self.frames) if not f.is_library), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LogScan:
    """What a log holds for triage: recognised messages, the last tracebacks, and facts about the file."""

    source: str
    bytes_read: int = 0
    lines: int = 0
    nul_bytes: int = 0
    compressed: bool = False
    sample_bytes: int = 0
    sample_odd: int = 0  # control bytes and undecodable bytes in the sample
    truncated_lines: int = 0
    read_error: str | None = None
    matches: list[Match] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    tracebacks: list[TracebackBlock] = field(default_factory=list)
    script: str | None = None  # the outermost `<module>` frame of the main process's last traceback
    root_cause_rank: int | None = None  # torchrun's "Root Cause (first observed failure)": its rank
    root_cause_local_rank: int | None = None

    @property
    def binary(self) -> bool:
        return self.sample_bytes > 0 and self.sample_odd / self.sample_bytes > BINARY_RATIO

    def of(self, *ids: str) -> list[Match]:
        return [m for m in self.matches if m.id in ids]

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "bytes": self.bytes_read,
            "lines": self.lines,
            "nul_bytes": self.nul_bytes,
            "binary": self.binary,
            "compressed": self.compressed,
            "truncated_lines": self.truncated_lines,
            "read_error": self.read_error,
            "script": self.script,
            "root_cause_rank": self.root_cause_rank,
            "counts": self.counts,
            "matches": [m.to_dict() for m in self.matches],
            "tracebacks": [t.to_dict() for t in self.tracebacks[-3:]],
        }


def _clean(raw: bytes) -> tuple[str, int | None]:
    """The line without colour codes and torchrun's rank prefix, and the rank that prefix named."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    prefix = RANK_PREFIX.match(text)
    if prefix is None:
        return text.rstrip(), None
    rank = prefix.group("rank")
    return text[prefix.end() :].rstrip(), int(rank) if rank is not None else None


class _Scanner:
    """Line-by-line state: the traceback being read, the matches kept so far."""

    def __init__(self, scan: LogScan) -> None:
        self.scan = scan
        self.block: TracebackBlock | None = None
        self.noise = 0
        self.first: dict[str, Match] = {}
        self.recent: deque[Match] = deque(maxlen=MAX_RECENT_MATCHES)
        self.blocks: deque[TracebackBlock] = deque(maxlen=MAX_TRACEBACKS)
        self.pending_wrapper: Match | None = None  # a `Caught X in DataLoader worker` awaiting its original error
        self.in_root_cause = False  # inside torchrun's root-cause block, before its rank line

    @property
    def in_traceback(self) -> bool:
        return self.block is not None

    def segment(self, raw: bytes, line: int) -> None:
        if len(raw) > MAX_SEGMENT:
            raw = raw[:MAX_SEGMENT]
            self.scan.truncated_lines += 1
        if not raw or (self.block is None and not has_keyword(raw)):
            return
        text, rank = _clean(raw)
        if not text:
            return
        self._root_cause_step(text)
        closed = self._traceback_step(text, line, rank)
        for m in match_line(text, line):
            if rank is not None:
                m.fields["rank"] = rank
            if BY_ID[m.id].needs_loader_frames and not (closed is not None and closed.through_loader):
                continue
            if len(m.text) > MAX_TEXT:
                m.text = m.text[:MAX_TEXT] + "..."
            if m.id in ("S9", "S10"):
                self.pending_wrapper = m
            self.scan.counts[m.id] = self.scan.counts.get(m.id, 0) + 1
            self.first.setdefault(m.id, m)
            self.recent.append(m)

    def _root_cause_step(self, text: str) -> None:
        if ROOT_CAUSE in text:
            self.in_root_cause = True
            return
        if self.in_root_cause:
            found = ROOT_CAUSE_RANK.fullmatch(text)
            if found is not None:
                self.in_root_cause = False
                self.scan.root_cause_rank = int(found["rank"])
                self.scan.root_cause_local_rank = int(found["local"]) if found["local"] is not None else None

    def _traceback_step(self, text: str, line: int, rank: int | None = None) -> TracebackBlock | None:
        """Follow tracebacks; returns the block this line closed (the line is its exception line)."""
        stripped = text.lstrip()
        if stripped.endswith(TRACEBACK_START):
            self._close(line)
            self.block = TracebackBlock(line, original=stripped.startswith("Original"), rank=rank)
            self.noise = 0
            return None
        block = self.block
        if block is None:
            return None
        if text[:1].isspace():
            frame = FRAME.fullmatch(text)
            if frame:
                block.add_frame(Frame(frame["file"], int(frame["line"]), frame["func"]))
            return None
        exc = exception_line(text)
        if exc is None:
            self.noise += 1
            if self.noise > MAX_NOISE_IN_TRACEBACK:
                self._close(line)
            return None
        block.exception, block.message = exc[0], exc[1][:MAX_TEXT]
        self._close(line)
        return block

    def _close(self, line: int) -> None:
        block, self.block = self.block, None
        if block is None:
            return
        block.end_line = line
        self.blocks.append(block)
        # torch prints a worker's chained exception as "Original <the first cause>", then the chain's tracebacks,
        # none of them headed "Original": the one that went through the worker's loop is what the worker raised.
        raised_in_worker = any(f.func == "_worker_loop" for f in block.frames)
        if (block.original or raised_in_worker) and block.exception and self.pending_wrapper is not None:
            wrapper = self.pending_wrapper
            if raised_in_worker or not block.frames:  # the chain's last: no later block overrides it
                self.pending_wrapper = None
            wrapper.fields["original_exception"] = block.exception
            wrapper.fields["original_message"] = block.message
            frame = block.user_frame()
            if frame is not None:
                wrapper.fields["frame"] = f"{frame.file}:{frame.line} in {frame.func}"
            called = block.frames.index(frame) + 1 if frame is not None else len(block.frames)
            if called < len(block.frames):  # the library call the user's frame made, where it was raised (np.load)
                lib = block.frames[called]
                wrapper.fields["raised_in"] = f"{lib.file}:{lib.line} in {lib.func}"
        if not block.original and block.frames and block.frames[0].func == "<module>":
            first = block.frames[0]
            if not first.is_library:
                self.scan.script = first.file

    def finish(self) -> None:
        self._close(0)
        self.scan.matches = sorted({id(m): m for m in [*self.first.values(), *self.recent]}.values(),
                                   key=lambda m: (m.line, m.id))  # fmt: skip
        self.scan.tracebacks = list(self.blocks)


def _account(scan: LogScan, chunk: bytes) -> None:
    scan.bytes_read += len(chunk)
    scan.nul_bytes += chunk.count(b"\0")
    if scan.sample_bytes < SAMPLE_BYTES:
        head = chunk[: SAMPLE_BYTES - scan.sample_bytes]
        scan.sample_bytes += len(head)
        odd = len(head) - len(head.translate(None, CONTROL_BYTES))
        odd += head.decode("utf-8", "replace").count("\ufffd")
        scan.sample_odd += odd


def scan_stream(stream: IO[bytes], source: str) -> LogScan:
    """Read the whole stream in chunks; memory stays bounded whatever its size or content."""
    scan = LogScan(source)
    scanner = _Scanner(scan)
    carry = b""
    dropping = False  # the current line outgrew MAX_SEGMENT: its head was kept, skip the rest of it
    line = 1
    last_byte = b""
    # read1: a torn gzip then still yields everything before the tear, and a pipe is read as it comes.
    read = getattr(stream, "read1", stream.read)
    while True:
        try:
            chunk = read(CHUNK_SIZE)
        except (OSError, EOFError, zlib.error) as exc:  # a torn gzip or a failing disk: keep what was read
            scan.read_error = str(exc) or type(exc).__name__
            break
        if not chunk:
            break
        _account(scan, chunk)
        last_byte = chunk[-1:]
        data = carry + chunk
        end = max(data.rfind(b"\n"), data.rfind(b"\r"), data.rfind(b"\0")) + 1
        complete, carry = data[:end], data[end:]
        if complete:
            if scanner.in_traceback or has_keyword(complete):
                pos = 0
                for sep in SEPARATORS.finditer(complete):
                    if dropping:
                        dropping = False
                    else:
                        scanner.segment(complete[pos : sep.start()], line)
                    if sep.group() == b"\n":
                        line += 1
                    pos = sep.end()
            else:  # nothing in here for us: count the lines at C speed and move on
                line += complete.count(b"\n")
                dropping = False
        if len(carry) > MAX_SEGMENT:
            if not dropping:
                scanner.segment(carry, line)  # counted as truncated there
            dropping = True
            carry = b""
    if carry and not dropping:
        scanner.segment(carry, line)
    scanner.finish()
    scan.lines = line - 1 if last_byte in (b"\n", b"") else line
    return scan


def open_log(stream: IO[bytes]) -> tuple[IO[bytes], bool]:
    """The stream to read, decompressing gzip (logs copied from clusters often are); True when it was."""
    buffered: Any = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(cast(Any, stream))
    if buffered.peek(2)[:2] == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=buffered)), True
    return cast(IO[bytes], buffered), False
