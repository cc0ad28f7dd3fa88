"""What the user asked `dlprobe scan` to do, parsed and checked outside the target, handed over in one env var."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import SCAN_OPTIONS_ENV
from dlprobe.units import parse_duration

START_METHODS = ("auto", "fork", "spawn", "forkserver")
DEFAULT_SAMPLE_TIMEOUT_S = 60.0


@dataclass
class ScanOptions:
    workers: int | None = None  # None: one per usable core
    sample_timeout_s: float = DEFAULT_SAMPLE_TIMEOUT_S
    start: int | None = None  # --range A:B, Python slice semantics
    stop: int | None = None
    sample: int | None = None  # --sample N random indices
    seed: int = 0
    start_method: str = "auto"
    every_loader: bool = False  # no --loader: every DataLoader the script has before training, not only the first

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ScanOptions:
        raw = os.environ.get(SCAN_OPTIONS_ENV)
        return cls(**json.loads(raw)) if raw else cls()

    def range_text(self) -> str:
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"

    def selection_text(self) -> str:
        parts = []
        if self.start is not None or self.stop is not None:
            parts.append(f"range {self.range_text()}")
        if self.sample is not None:
            parts.append(f"random {self.sample} (seed {self.seed})")
        return ", ".join(parts) or "all"


def parse_range(text: str) -> tuple[int | None, int | None]:
    """'100:200' -> (100, 200); either side may be left out; negative numbers count from the end."""
    start_text, sep, stop_text = text.partition(":")
    try:
        if not sep:
            raise ValueError
        start = int(start_text) if start_text.strip() else None
        stop = int(stop_text) if stop_text.strip() else None
    except ValueError:
        raise DlprobeError(
            f"--range {text!r} is not a range", hint="write it as START:STOP, e.g. --range 0:1000 or --range 5000:"
        ) from None
    return start, stop


def parse_timeout(text: str) -> float:
    """'30' or '30s' or '2m' -> seconds; must be positive."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise DlprobeError(f"--sample-timeout: {exc}", hint="e.g. --sample-timeout 30s") from None
    if seconds <= 0:
        raise DlprobeError("--sample-timeout must be more than 0", hint="e.g. --sample-timeout 30s")
    return seconds


def build_options(
    workers: int | None,
    sample_timeout: str | None,
    range_text: str | None,
    sample: int | None,
    seed: int,
    start_method: str,
) -> ScanOptions:
    """Check the command-line values; every mistake is a usage error before the script even starts."""
    if workers is not None and workers < 1:
        raise DlprobeError(f"--workers {workers}: need at least 1 worker process", hint="e.g. --workers 4")
    if sample is not None and sample < 1:
        raise DlprobeError(f"--sample {sample}: need at least 1 sample", hint="e.g. --sample 1000")
    if start_method not in START_METHODS:
        raise DlprobeError(f"--start-method {start_method!r} is not known", hint=f"one of {', '.join(START_METHODS)}")
    start, stop = parse_range(range_text) if range_text else (None, None)
    timeout = parse_timeout(sample_timeout) if sample_timeout else DEFAULT_SAMPLE_TIMEOUT_S
    return ScanOptions(workers, timeout, start, stop, sample, seed, start_method)
