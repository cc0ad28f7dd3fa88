"""Every loader the probe has seen in this process, by loader and by iterator, and what hooks.py's wrappers share
with the modules they call: the re-entry guard, flush_all, and the look-ups tune and scan make (probe_id,
repeated_samples). Loaders and iterators are held weakly: the probe never keeps one alive."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from dlprobe.in_training import probe_errors, worker_batches
from dlprobe.in_training.loader_probe import LoaderProbe

probes: weakref.WeakKeyDictionary[Any, LoaderProbe] = weakref.WeakKeyDictionary()  # by loader
iterators: weakref.WeakKeyDictionary[Any, LoaderProbe] = weakref.WeakKeyDictionary()  # by the loader's iterator
all_probes: list[LoaderProbe] = []  # in the order the loaders were first iterated: a probe's index is its loader id
created: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()  # each loader's time.time() at __init__
# Re-entry guards: a subclass's __iter__/__next__ that calls the base one must be probed once, by the outermost.
inside = threading.local()


def probe_id(loader: Any) -> int | None:
    """The id the probe gave a loader (its events carry it), or None if it was never iterated."""
    probe = probes.get(loader)
    return probe.loader_id if probe is not None else None


def repeated_samples(loader: Any) -> tuple[int, int] | None:
    """(repeated samples, samples) the probe counted in the loader's current epoch, or None where it counts none."""
    probe = probes.get(loader)
    dupes = probe.dupes if probe is not None else None
    return (dupes.duplicates, dupes.samples) if dupes is not None else None


def forget_loaders() -> None:
    """Forget every loader seen so far (hooks.reset: the next one iterated is loader 0)."""
    probes.clear()
    iterators.clear()
    all_probes.clear()


def flush_all() -> None:
    """Send whatever batch timings are still buffered (at exit, or before an error is reported)."""
    worker_batches.flush_threads()  # thread workers' rows: no finalizer of theirs runs at exit
    for probe in all_probes:
        try:
            probe.flush()
        except Exception as exc:
            probe_errors.record("hooks.flush", exc, f"batch timings of loader {probe.loader_id} may be incomplete")
    probe_errors.flush()
