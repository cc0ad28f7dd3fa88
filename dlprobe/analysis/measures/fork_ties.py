"""Whether a worker's error comes of a handle the dataset held as its workers forked (in_training/fork_handles.py's
`fork_handles` event): a measure `shared-handle` (findings/shared_handle.py) and the sample check's reading
(findings/deaths/sample_checks.py) both need, so that the one names the handle and the other does not blame a sample
for it."""

from __future__ import annotations

import re
from typing import Any

from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_FORK_HANDLES
from dlprobe.torch_text import fork_shared_error

# Error types that are a read or a connection failing: with a shared handle in the dataset, the handle is the first
# suspect, whatever index the failure landed on.
IO_ERRORS = ("OSError", "IOError", "EOFError", "BlockingIOError", "ConnectionError", "BrokenPipeError",
             "ConnectionResetError", "TimeoutError", "UnpicklingError", "DecodeError")  # fmt: skip


def library(owner: str) -> str:
    """The library an object's class comes from: 'h5py._hl.files.File' -> 'h5py'; Python's own file objects -> 'io'."""
    top = owner.split(".", 1)[0]
    return "io" if top in ("_io", "io") else top


def shared_handles(run: RunData, loader: LoaderRecord) -> list[dict[str, Any]]:
    """The descriptors a forked loader's dataset held as its workers forked (none for spawn, forkserver, no workers)."""
    if loader.start_method != "fork" or not loader.config.get("num_workers"):
        return []
    events = events_of(run, EV_FORK_HANDLES, loader.loader_id)
    return [h for h in (events[0].get("handles") or []) if isinstance(h, dict)] if events else []


def tied_error(text: str, kind: str, handles: list[dict[str, Any]], io_errors: bool = True) -> str | None:
    """Why an error (its message and traceback `text`, its type `kind`) points at the shared handles: its traceback
    names the attribute or the handle's library, it is an error a handle shared across the fork is known to raise,
    or (io_errors) it is an I/O error; None where it does not."""
    for h in handles:
        attr, lib = h["attribute"], library(h["owner"])
        if re.search(re.escape(attr) + r"\b", text):
            return f"its traceback reads `{attr}`"
        if lib != "io" and re.search(rf"(^|[\s/\"'.]){re.escape(lib)}[./]", text):
            return f"it is raised inside {lib}"
    if not handles:
        return None
    known = fork_shared_error(text)
    if known is not None:
        return f"it is {known[0]}'s error for {known[1]}"
    if io_errors and kind in IO_ERRORS:
        return f"it is an {kind}, a read failing"
    return None
