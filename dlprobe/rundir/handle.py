"""RunDir: one handle for a run directory's paths, so that no module outside rundir/ joins layout.py's names by hand.

The handle only names paths; it opens nothing. Whoever opens one still goes through dlprobe.atomic (O_NOFOLLOW, a
link at the name refused) or rundir.files.run_subdir (a linked folder not followed): the rule that no link leads a
reader or writer out of the run directory stays where the file is opened. Imports only pathlib and layout.py, both
light enough for the training process (a frozen dataclass would bring dataclasses and inspect, ~13 modules, into
processes that import nothing else of it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlprobe.rundir import layout


class RunDir:
    """A run directory (or a `dlprobe tune` root, which holds tune.json and tune.png beside its trial runs): a value,
    immutable, equal to another of the same root."""

    __slots__ = ("root",)
    root: Path

    def __init__(self, root: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "root", Path(root))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RunDir is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def __fspath__(self) -> str:
        return os.fspath(self.root)

    def __str__(self) -> str:
        return str(self.root)

    # --- files at the top ----------------------------------------------------------------------------------------
    @property
    def meta(self) -> Path:
        return self.root / layout.META_FILE

    @property
    def events(self) -> Path:
        return self.root / layout.EVENTS_FILE

    @property
    def samples(self) -> Path:
        return self.root / layout.SAMPLES_FILE

    @property
    def result(self) -> Path:
        return self.root / layout.RESULT_FILE

    @property
    def report(self) -> Path:
        return self.root / layout.REPORT_FILE

    @property
    def report_html(self) -> Path:
        return self.root / layout.REPORT_HTML_FILE

    @property
    def trace(self) -> Path:
        return self.root / layout.TRACE_FILE

    @property
    def plot(self) -> Path:
        return self.root / layout.PLOT_FILE

    @property
    def plot_partial(self) -> Path:
        return self.root / layout.PLOT_PARTIAL_FILE

    @property
    def plot_error(self) -> Path:
        return self.root / layout.PLOT_ERROR_FILE

    @property
    def stderr(self) -> Path:
        return self.root / layout.STDERR_FILE

    @property
    def kernel(self) -> Path:
        return self.root / layout.KERNEL_FILE

    @property
    def check(self) -> Path:
        return self.root / layout.CHECK_FILE

    @property
    def stacks(self) -> Path:
        """stacks.txt: the stack samples, py-spy's collapsed format."""
        return self.root / layout.STACKS_FILE

    @property
    def stacks_burst(self) -> Path:
        """stacks.txt.burst: one py-spy burst's output before it is appended to stacks.txt (then removed)."""
        return self.root / (layout.STACKS_FILE + layout.STACKS_BURST_SUFFIX)

    @property
    def stacks_meta(self) -> Path:
        return self.root / layout.STACKS_META_FILE

    @property
    def stacks_speedscope(self) -> Path:
        return self.root / layout.STACKS_SPEEDSCOPE_FILE

    @property
    def py_spy_log(self) -> Path:
        return self.root / layout.PY_SPY_LOG_FILE

    @property
    def attach(self) -> Path:
        return self.root / layout.ATTACH_FILE

    @property
    def live_summary(self) -> Path:
        return self.root / layout.LIVE_SUMMARY_FILE

    @property
    def tune_result(self) -> Path:
        return self.root / layout.TUNE_RESULT_FILE

    @property
    def tune_plot(self) -> Path:
        return self.root / layout.TUNE_PLOT_FILE

    # --- folders and what is in them -----------------------------------------------------------------------------
    @property
    def hangs_dir(self) -> Path:
        return self.root / layout.HANGS_DIR

    def hang_record(self, number: int) -> Path:
        """hangs/hang-N.json."""
        return self.hangs_dir / layout.hang_record_name(number)

    @property
    def stacks_dir(self) -> Path:
        return self.root / layout.STACKS_DIR

    def hang_stack(self, number: int, pid: int) -> Path:
        """stacks/hangN-PID.json."""
        return self.stacks_dir / layout.hang_stack_name(number, pid)

    @property
    def faulthandler(self) -> Path:
        """stacks/faulthandler.txt."""
        return self.stacks_dir / layout.FAULTHANDLER_FILE

    @property
    def inflight_dir(self) -> Path:
        return self.root / layout.INFLIGHT_DIR

    def inflight_slot(self, pid: int) -> Path:
        """inflight/PID.bin."""
        return self.inflight_dir / layout.inflight_slot_name(pid)

    @property
    def faults_dir(self) -> Path:
        return self.root / layout.FAULTS_DIR

    def fault_record(self, pid: int) -> Path:
        """faults/PID.txt."""
        return self.faults_dir / layout.fault_record_name(pid)

    # --- what a reader lists (in a folder already checked to be no link: rundir.files.run_subdir) ------------------
    @staticmethod
    def hang_records_in(folder: Path) -> Iterator[Path]:
        """The hang-N.json records in a hangs/ folder (unsorted)."""
        return folder.glob(layout.HANG_RECORD_GLOB)

    @staticmethod
    def fault_records_in(folder: Path) -> Iterator[Path]:
        """The PID.txt records in a faults/ folder (unsorted)."""
        return folder.glob(f"*{layout.FAULT_RECORD_SUFFIX}")

    def attempt(self, number: int) -> RunDir:
        """`dlprobe tune`'s root: attempt-N, the run directory of its Nth attempt at a trial."""
        return RunDir(self.root / layout.tune_attempt_name(number))


def hang_record_ref(number: int) -> str:
    """The name of hang N's record inside the run directory, as the report cites it: hangs/hang-N.json."""
    return f"{layout.HANGS_DIR}/{layout.hang_record_name(number)}"


def inflight_ref(name: str) -> str:
    """inflight/NAME: a slot's name inside the run directory, as problems quote it."""
    return f"{layout.INFLIGHT_DIR}/{name}"


def faults_ref(name: str) -> str:
    """faults/NAME: a fault record's name inside the run directory, as problems quote it."""
    return f"{layout.FAULTS_DIR}/{name}"


__all__ = ["RunDir", "faults_ref", "hang_record_ref", "inflight_ref"]
