"""Train without the samples `dlprobe scan --exclude-out FILE` found bad: read the file, skip those indices.

    from dlprobe.exclude import ExcludeIndices, load_excluded
    dataset = ExcludeIndices(dataset, load_excluded("bad.txt"))

Works with any map-style dataset (anything with __getitem__ and __len__); it imports nothing heavy.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dlprobe.atomic import write_text_atomic

HEADER = "# dlprobe scan exclude file"


def write_excluded(path: str | os.PathLike[str], bad: Sequence[dict[str, Any]], unit: str, about: str) -> None:
    """One bad index (or stream position) per line, with its kind as a comment; '#' lines are comments."""
    lines = [HEADER, f"# {about}", f"# one {unit} per line; read with dlprobe.exclude.load_excluded()"]
    for entry in bad:
        lines.append(f"{entry[unit]}  # {entry['kind']}")
    write_text_atomic(path, "\n".join(lines) + "\n")


def load_excluded(path: str | os.PathLike[str]) -> frozenset[int]:
    """The indices in an exclude file (blank lines and '#' comments ignored)."""
    out: set[int] = set()
    with open(path) as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                out.add(int(text))
            except ValueError:
                raise ValueError(f"{os.fspath(path)}:{number}: not an index: {text!r}") from None
    return frozenset(out)


def _kept(length: int, excluded: Iterable[int]) -> list[int]:
    skip = set(excluded)
    return [i for i in range(length) if i not in skip]


class ExcludeIndices:
    """A view of `dataset` without the excluded indices: item i is dataset[kept[i]]."""

    def __init__(self, dataset: Any, excluded: Iterable[int]) -> None:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError("ExcludeIndices needs a map-style dataset (with __getitem__ and __len__)")
        self.dataset = dataset
        self.kept = _kept(len(dataset), excluded)

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.kept[index]]


class SkipIndicesSampler:
    """A DataLoader sampler over every index of `dataset` but the excluded ones, in order or shuffled."""

    def __init__(self, dataset: Any, excluded: Iterable[int], shuffle: bool = False, seed: int | None = None) -> None:
        self.kept = _kept(len(dataset), excluded)
        self.shuffle = shuffle
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.kept)

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(self.kept)
        order = list(self.kept)
        self._rng.shuffle(order)  # a new order every epoch
        return iter(order)
