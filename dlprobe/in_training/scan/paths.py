"""Finds the file behind a bad index: common dataset attributes first, then a path named in the error."""

from __future__ import annotations

import bisect
import os
import re
from typing import Any

# Lists whose item i describes sample i: ImageFolder's `samples`/`imgs` hold (path, label); others hold paths.
PATH_ATTRIBUTES = ("samples", "imgs", "files", "paths", "file_paths", "filepaths", "image_paths", "filenames")
MAX_DEPTH = 4
_QUOTED_PATH = re.compile(r"""['"]((?:/|\./|\.\./|~/|[A-Za-z]:\\)[^'"\n]+)['"]""")
_BARE_PATH = re.compile(r"(?<![\w.])(/[\w.+@-]+(?:/[\w.+@-]+)+)")


def path_for(dataset: Any, index: int, detail: str = "") -> str | None:
    """The path of sample `index` if the dataset says, else a path-like string in the error message."""
    try:
        path = _from_dataset(dataset, index, 0)
    except Exception:  # a dataset's own attributes must never break the scan's report
        path = None
    return path or path_in_message(detail)


def path_in_message(message: str) -> str | None:
    match = _QUOTED_PATH.search(message) or _BARE_PATH.search(message)
    return match.group(1) if match else None


def _length(obj: Any) -> int | None:
    try:
        return len(obj)
    except Exception:
        return None


def _from_dataset(dataset: Any, index: int, depth: int) -> str | None:
    if depth > MAX_DEPTH:
        return None
    inner = getattr(dataset, "dataset", None)
    indices = getattr(dataset, "indices", None)
    if inner is not None and indices is not None:  # torch's Subset
        return _from_dataset(inner, int(indices[index]), depth + 1)
    parts, sizes = getattr(dataset, "datasets", None), getattr(dataset, "cumulative_sizes", None)
    if parts is not None and sizes is not None:  # torch's ConcatDataset
        which = bisect.bisect_right(sizes, index)
        offset = index - (sizes[which - 1] if which else 0)
        return _from_dataset(parts[which], offset, depth + 1)
    length = _length(dataset)
    for name in PATH_ATTRIBUTES:
        values = getattr(dataset, name, None)
        if values is None or isinstance(values, (str, bytes)) or (length is not None and _length(values) != length):
            continue
        try:
            path = _as_path(values[index])
        except Exception:  # noqa: S112 - a value that names no file: try the next field
            continue
        if path:
            return path
    if inner is not None and length is not None and _length(inner) == length:  # a wrapper that keeps indices
        return _from_dataset(inner, index, depth + 1)
    return None


def _as_path(item: Any) -> str | None:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item) if isinstance(item, os.PathLike) else item
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], (str, os.PathLike)):
        return _as_path(item[0])
    if isinstance(item, dict):
        for key in ("path", "file", "filename", "image", "img_path"):
            if isinstance(item.get(key), (str, os.PathLike)):
                return _as_path(item[key])
    return None
