"""A process's open file descriptors from /proc: how many, its RLIMIT_NOFILE, and what the most point to.

Counting is one getdents of /proc/PID/fd (tens of microseconds for a few hundred descriptors), cheap enough to read
with the memory; the targets take a readlink each, so they are read only when a count has climbed, and bounded."""

from __future__ import annotations

import os
import re
from collections import Counter

TARGETS_MAX = 4096  # descriptors whose target is read at most, per reading of the targets
PATTERNS_KEPT = 5
_DIGITS = re.compile(r"\d+")
_FOLDER_DIGITS = re.compile(r"\d{2,}")
_KERNEL_OBJECT = re.compile(r"^(socket|pipe|anon_inode):")


def fd_count(pid: int) -> int | None:
    """How many descriptors the process has open; None where /proc refuses (gone, another user's)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def nofile_limit(pid: int) -> int | None:
    """The process's soft RLIMIT_NOFILE from /proc/PID/limits; None when unlimited or not read."""
    try:
        with open(f"/proc/{pid}/limits", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft = line[len("Max open files") :].split()[0]
                    return int(soft) if soft.isdigit() else None
    except OSError:
        return None
    return None


def target_pattern(target: str) -> str:
    """A descriptor's target with its numbers folded: /data/00012/shard_3.npy -> /data/*/shard_*.npy (every number
    in the file's name, runs of 2 or more digits in its folders: a temporary folder's single digits are kept);
    socket:[123] -> socket; anon_inode:[eventfd] kept as it is (it names the kind)."""
    kind = _KERNEL_OBJECT.match(target)
    if kind and kind.group(1) != "anon_inode":
        return kind.group(1)
    folder, sep, name = target.rpartition("/")
    return _FOLDER_DIGITS.sub("*", folder) + sep + _DIGITS.sub("*", name)


def fd_target_patterns(pid: int, limit: int = TARGETS_MAX) -> list[tuple[str, int]] | None:
    """The most common target patterns of the process's descriptors, most first (PATTERNS_KEPT of them); None where
    /proc refuses."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    counts: Counter[str] = Counter()
    for name in names[:limit]:
        try:
            counts[target_pattern(os.readlink(f"/proc/{pid}/fd/{name}"))] += 1
        except OSError:  # noqa: PERF203, S112 - closed between the listing and the readlink: not counted
            continue
    return counts.most_common(PATTERNS_KEPT)
