"""Where a worker's loading time goes, read from py-spy's samples: the fetch path (torch's fetch() inwards), its
samples by category, function and line, and the installed library most of them are in. Numbers only: the
worker-hotspots finding (findings/hotspots.py) and the supervisor's stack recorder both read them."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from importlib import metadata
from typing import Any

from dlprobe.analysis.run.stackfile import StackCount

# torch's fetch(), or the same logic in dlprobe's in-flight recorder that stands in for it (in_training/inflight.py)
_FETCH = re.compile(r"^(_(Map|Iterable)DatasetFetcher\.fetch|_(map|iterable)_fetch) ")
# Checked innermost-out per sample, first match wins; each is (category, frame pattern).
_READ = r"^(open|read|readinto|read_bytes|load|fromfile|stat) |.*(h5py|lmdb|/io\.py|numpy/lib/_?npyio).*"
_SEND = r".*(multiprocessing/queues\.py|multiprocessing/reduction|torch/multiprocessing/reductions).*"
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("decode", re.compile(r"(PIL/|ImageFile\.py|Image\.py).*|.*(decode|imdecode|imread|torchvision/io/).*", re.I)),
    ("file read", re.compile(_READ)),
    ("transforms", re.compile(r".*(transforms|albumentations|augment|kornia).*", re.I)),
    ("collate", re.compile(r".*collate.*")),
    ("send to main process", re.compile(_SEND)),
)
LINE_NUMBER = re.compile(r":\d+\)$")
# Plumbing, not the user's loading code: torch, multiprocessing, and dlprobe's own in-flight recording.
_LIBRARY = re.compile(r"\((<|torch/|multiprocessing/|threading\.py|queue\.py|dlprobe/(target|in_training)/)")
_OURS = re.compile(r"\(dlprobe/(target|in_training)/")


def _category(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, pattern in CATEGORIES:
            if pattern.match(frame):
                return name
    return "dataset code"


def _innermost_not_ours(frames: list[str], whole: list[str]) -> str:
    """With only plumbing on the stack, name torch's frame (e.g. default_collate) rather than dlprobe's.

    With only dlprobe's stand-in for fetch() left, the worker loop that called it (the innermost frame of the whole
    stack that is not ours: the worker's own loop comes before any frame inherited from the parent).
    """
    inner = next((f for f in reversed(frames) if not _OURS.search(f)), None)
    return inner or next((f for f in reversed(whole) if not _OURS.search(f)), whole[-1] if whole else "?")


def fetch_path(frames: list[str]) -> list[str]:
    """The frames from fetch() inwards: the loading work itself.

    A forked worker's stack still begins with the parent's frames at the moment it forked (the script's <module>,
    Lightning's CombinedLoader creating the iterators); those did not run in the worker and must never be named.
    """
    start = next((i for i, f in enumerate(frames) if _FETCH.match(f)), None)
    return frames[start:] if start is not None else []


def rank(samples: list[StackCount]) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Samples of the fetch path by category, by function, and by function and line (which call of it runs or
    waits); benchmarks/hotspot_quality.py ranks a full-rate py-spy profile with the same function."""
    categories: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for s in samples:
        frames = fetch_path(s.frames)
        categories[_category(frames)] += s.count
        # The innermost frame that is not torch/multiprocessing plumbing: the user's (or a library's) code.
        own = next((f for f in reversed(frames) if not _LIBRARY.search(f)), _innermost_not_ours(frames, s.frames))
        functions[LINE_NUMBER.sub(")", own)] += s.count  # one row per function, whichever of its lines was running
        lines[own] += s.count
    return categories, functions, lines


# A library's frame as py-spy names it: "Series.__getitem__ (pandas/core/series.py:1121)", its file relative to the
# site-packages it was imported from; the script's own files are named from its directory ("train.py:31").
_FRAME_FILE = re.compile(r"\((?P<file>[^():]+):\d+\)$")
LIBRARY_SHARE = 0.5  # the loading samples inside one library from which the fix names it, not the dataset's code


@cache
def _installed() -> frozenset[str]:
    """Top-level import names of the distributions installed where the analysis runs (their metadata is read, no
    module is imported): the names a library's frames start with."""
    try:
        return frozenset(metadata.packages_distributions())
    except Exception:  # a broken distribution's metadata: no library is named, the finding stays as it was
        return frozenset()


def library_of(frame: str) -> str | None:
    """The installed library a frame is in ("pandas"), or None (the script's own code, torch's plumbing, dlprobe)."""
    match = _FRAME_FILE.search(frame)
    if match is None or _LIBRARY.search(frame) or "/" not in match["file"]:
        return None
    top = match["file"].split("/", 1)[0]
    return top if top in _installed() else None


def library_time(samples: list[StackCount], total: int) -> dict[str, Any] | None:
    """The library most of the loading time went into, entered from the user's code: its share of the loading
    samples and the user's frame (with its line) that called into it most. None: no library holds LIBRARY_SHARE."""
    inside: Counter[str] = Counter()
    callers: dict[str, Counter[str]] = {}
    for s in samples:
        frames = fetch_path(s.frames)
        entry = next((i for i, f in enumerate(frames) if library_of(f)), None)
        if entry is None:
            continue
        library = str(library_of(frames[entry]))
        caller = next((f for f in reversed(frames[:entry]) if not _LIBRARY.search(f)), None)
        if caller is None:  # torch's collate calling numpy, say: not the dataset's call
            continue
        inside[library] += s.count
        callers.setdefault(library, Counter())[caller] += s.count
    if not inside or not total:
        return None
    library, count = inside.most_common(1)[0]
    if count < LIBRARY_SHARE * total:
        return None
    caller, _ = callers[library].most_common(1)[0]
    return {"library": library, "share": round(count / total, 3), "samples": count, "called_from": caller}


def in_fetch(stacks: list[StackCount], pids: set[int | None] | None = None) -> list[StackCount]:
    """The samples (of these processes; None: of any) inside fetch(): a worker waiting for its next index is not
    loading."""
    return [s for s in stacks if (pids is None or s.pid in pids) and any(_FETCH.match(f) for f in s.frames)]


def in_probe(sample: StackCount) -> bool:
    """A sample caught inside the probe's own recording (a clock read, a slot write), not in the loading code.

    Its clock reads are system calls, where the kernel switches out a worker whose slice is up, so on a busy machine
    (and with --idle, which samples runnable threads too) they collect the time a worker sat queued for a core
    around them: a quarter of the samples of a CPU-bound loader on 2 loaded cores. That time is no function's to
    speed up (the clocks report it as queued); the fetch stand-in itself (_map_fetch) still counts, as a dataset
    whose __getitem__ is C code (a list, a tensor) runs there.
    """
    inner = sample.frames[-1] if sample.frames else ""
    return bool(_OURS.search(inner)) and not _FETCH.match(inner)
