"""Remedy 3 (dlprobe.fixes.build_file_index) against an ImageFolder-style walk, on a generated class-folder tree.

Measured in one process, rounds alternating: torchvision's find_classes + make_dataset written out (sorted
os.walk, sorted names, extension check; what ImageFolder runs), the same plus an os.path.isfile per file (the
per-file check many hand-written walks add), build_file_index with no cache, and the cached reload. Also the
memory of the (path, class) list of tuples against the packed index. --latency-us adds a delay to every
directory entry listed (as the slow_directory_walk test script does) to emulate network storage, where one
scandir per folder in parallel threads is what pays off; the local numbers are with a warm page cache.

Usage: python benchmarks/fix_file_index.py [--files 1000000] [--classes 1000] [--tree DIR] [--rounds 3]
       [--latency-us 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, median

from dlprobe.fixes import build_file_index
from dlprobe.fixes.file_index import IMG_EXTENSIONS


def image_folder_walk(root: str, per_file_check: bool = False) -> list[tuple[str, int]]:
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for index, name in enumerate(classes):
        for folder, _, names in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for fname in sorted(names):
                path = os.path.join(folder, fname)
                if path.lower().endswith(IMG_EXTENSIONS) and (not per_file_check or os.path.isfile(path)):
                    samples.append((path, index))
    return samples


def make_tree(root: Path, files: int, classes: int) -> None:
    marker = root / f".complete-{files}-{classes}"
    if marker.exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    per_class = -(-files // classes)
    made = 0
    for c in range(classes):
        folder = root / f"n{c:08d}"
        folder.mkdir(parents=True)
        for i in range(min(per_class, files - made)):
            os.close(os.open(folder / f"n{c:08d}_{i}.JPEG", os.O_CREAT | os.O_WRONLY, 0o644))
        made += min(per_class, files - made)
    marker.touch()


def list_bytes(samples: list[tuple[str, int]]) -> int:
    return sys.getsizeof(samples) + sum(sys.getsizeof(t) + sys.getsizeof(t[0]) for t in samples)


def slow_scandir(latency_s: float):  # type: ignore[no-untyped-def]
    local = os.scandir

    class NetworkScandir:
        def __init__(self, path: str) -> None:
            self.inner = local(path)

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

        def __iter__(self):  # type: ignore[no-untyped-def]
            return self

        def __next__(self):  # type: ignore[no-untyped-def]
            entry = next(self.inner)
            time.sleep(latency_s)
            return entry

    return NetworkScandir


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--tree", help="where to build the tree (kept for the next run); default: a temp folder")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-us", type=float, default=0.0, help="emulated delay per directory entry listed")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    tmp = tempfile.mkdtemp(prefix="fix-file-index-")
    try:
        root = Path(args.tree) if args.tree else Path(tmp) / "tree"
        _, made_s = timed(lambda: make_tree(root, args.files, args.classes))
        print(f"tree: {args.files:,} empty .JPEG files in {args.classes} class folders under {root} "
              f"(made in {made_s:.0f} s)")  # fmt: skip
        if args.latency_us:
            os.scandir = slow_scandir(args.latency_us / 1e6)  # type: ignore[assignment,misc]
            print(f"emulated network storage: {args.latency_us:g} us per directory entry listed")
        cache = Path(tmp) / "cache"
        walk, walk_check, build = [], [], []
        reference: list[tuple[str, int]] = []
        for _ in range(args.rounds):
            reference, t = timed(lambda: image_folder_walk(str(root)))
            walk.append(t)
            if not args.latency_us:  # isfile is a stat, not a listed entry: the emulation would not slow it
                walk_check.append(timed(lambda: image_folder_walk(str(root), per_file_check=True))[1])
            index, t = timed(lambda: build_file_index(root, cache=False, workers=args.workers))
            build.append(t)
        assert list(index) == reference, "the index differs from the ImageFolder-style walk"
        first, first_s = timed(lambda: build_file_index(root, cache_dir=cache, workers=args.workers))
        reloads = [timed(lambda: build_file_index(root, cache_dir=cache))[1] for _ in range(max(5, args.rounds))]
        assert build_file_index(root, cache_dir=cache).from_cache
        cache_bytes = sum(f.stat().st_size for f in cache.iterdir())
        print(f"ImageFolder-style walk (sorted os.walk)   median {median(walk):7.2f} s")
        if walk_check:
            print(f"  same + os.path.isfile per file           median {median(walk_check):7.2f} s")
        print(f"build_file_index, {args.workers} threads, no cache   median {median(build):7.2f} s   "
              f"({median(walk) / median(build):.1f}x faster than the walk)")  # fmt: skip
        print(f"build_file_index, first build + cache write      {first_s:7.2f} s   "
              f"(cache file {cache_bytes / 2**20:.0f} MiB)")  # fmt: skip
        print(f"build_file_index, cached reload          median {median(reloads):7.3f} s   "
              f"({median(walk) / median(reloads):.0f}x faster than the walk)")  # fmt: skip
        print(f"memory: list of (path, class) tuples {list_bytes(reference) / 2**20:.0f} MiB of Python objects; "
              f"packed index {first.nbytes / 2**20:.0f} MiB in 4 numpy arrays")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
