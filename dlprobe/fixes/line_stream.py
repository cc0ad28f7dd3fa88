"""A line-index stream (`path label` per line) that every (rank, worker) reads a disjoint share of, exactly once.

Before (each of the num_workers workers, on each rank, yields the whole file; and the list of lines is copied
into every worker)::

    class Index(IterableDataset):
        def __iter__(self):
            for line in open("train.txt"):
                path, label = line.split()
                yield path, int(label)

After (each worker of each rank reads its own byte ranges of the file, a block order reshuffled every epoch)::

    from dlprobe.fixes import ShardedLineStream
    stream = ShardedLineStream("train.txt", seed=0, drop_last=True)  # drop_last keeps DDP ranks in step
    loader = DataLoader(stream, batch_size=256, num_workers=8)
    for epoch in range(epochs):
        stream.set_epoch(epoch)
        for paths, labels in loader: ...

How the file is cut: into blocks of about `block_bytes`, their number rounded up to a multiple of S = world_size x
num_workers so that every (rank, worker) gets the same number of blocks. A line belongs to the block its first
byte falls in (a reader seeks to the block's start, skips the rest of a line begun before it, and reads past
the block's end to finish its last line), so every line is read exactly once with no index of line offsets.
The blocks are permuted from (seed, epoch), the same permutation on every rank, and dealt round-robin: block
`perm[j]` goes to (rank, worker) number `j % S`. Within a block lines come in file order. Every rank must use
the same num_workers and seed, and the file must not change during an epoch.

The remainder: blocks are cut by bytes, so (rank, worker) shares hold about, not exactly, the same number of
lines; with drop_last=False every line is yielded once and ranks may yield a few lines more or fewer than each
other (a DDP job then waits in a collective at the end of the epoch). drop_last=True counts the lines of every
block once per process (one streaming pass over the file, O(blocks) memory) and has every rank yield exactly
the smallest rank's count: each rank drops the last lines of its share in that epoch's block order, so which
lines are dropped changes every epoch. Bad lines count as lines there (use on_bad_line="error" or a clean file
when ranks must stay exactly in step).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from multiprocessing.context import get_spawning_popen
from multiprocessing.sharedctypes import RawArray
from typing import Any

import numpy as np

COUNT_CHUNK = 8 << 20  # bytes read at a time when counting lines
Block = tuple[int, int, int]  # start byte, end byte, most lines to read (-1: all)


def parse_path_label(line: str) -> tuple[str, int]:
    """`path label` -> (path, int(label)); the label is the last word, so a path may contain spaces."""
    path, label = line.rsplit(None, 1)
    return path, int(label)


def _block_bounds(size: int, block_bytes: int, shards: int) -> list[int]:
    n_blocks = max(1, math.ceil(size / block_bytes))
    n_blocks = math.ceil(n_blocks / shards) * shards
    return [k * size // n_blocks for k in range(n_blocks + 1)]


def count_block_lines(path: str, bounds: list[int]) -> np.ndarray:
    """How many lines start in each block [bounds[k], bounds[k+1]), in one streaming pass over the file."""
    size = bounds[-1]
    edges = np.asarray(bounds, dtype=np.int64)
    counts = np.zeros(len(bounds) - 1, dtype=np.int64)
    if size == 0:
        return counts
    counts[np.searchsorted(edges, 0, side="right") - 1] += 1  # the first line starts at byte 0
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            chunk = np.frombuffer(f.read(min(COUNT_CHUNK, size - pos)), dtype=np.uint8)
            if not len(chunk):
                break
            starts = np.flatnonzero(chunk == 10) + pos + 1  # a newline at p starts a line at p + 1 ...
            starts = starts[starts < size]  # ... unless it ends the file
            np.add.at(counts, np.searchsorted(edges, starts, side="right") - 1, 1)
            pos += len(chunk)
    return counts


def _line_number(path: str, offset: int) -> int:
    """1-based number of the line that starts at byte `offset` (only computed for an error message)."""
    newlines = 0
    with open(path, "rb") as f:
        while offset > 0:
            chunk = f.read(min(COUNT_CHUNK, offset))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            offset -= len(chunk)
    return newlines + 1


def _resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values, else torch.distributed when initialised, else $RANK / $WORLD_SIZE (torchrun), else 0 / 1."""
    found_rank, found_world = 0, 1
    if rank is None or world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            found_rank, found_world = dist.get_rank(), dist.get_world_size()
        else:
            found_rank, found_world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    rank = found_rank if rank is None else rank
    world_size = found_world if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"ShardedLineStream: rank {rank} is not within world_size {world_size}")
    return rank, world_size


class _SharedState:
    """The epoch and the bad-line counts, shared with DataLoader workers (forked, spawned or forkserver).

    Workers started before a set_epoch (persistent_workers=True) must see it, and the parent must see what they
    skipped. A lock-free shared array (multiprocessing.sharedctypes, backed by a file descriptor that any start
    method can pass on): slot 0 is the epoch, written by the parent only; then one bad-line counter per
    process, slot 1 for the parent and 2 + worker id for a worker, each written by its own process only, so no
    lock (a lock made in one start method's context cannot be passed to a process of another). Pickled other
    than to start a worker (a deepcopy, a user's own pickle) it becomes a private copy.
    """

    SLOTS = 2 + 256

    def __init__(self) -> None:
        self._values: Any = RawArray("q", self.SLOTS)

    @property
    def epoch(self) -> int:
        return int(self._values[0])

    def set_epoch(self, epoch: int) -> None:
        self._values[0] = epoch
        for i in range(1, self.SLOTS):
            self._values[i] = 0

    @property
    def bad_lines(self) -> int:
        return int(sum(self._values[1:]))

    def add_bad(self, worker: int | None, n: int) -> None:
        slot = 1 if worker is None else 2 + worker % (self.SLOTS - 2)
        self._values[slot] += n

    def __getstate__(self) -> dict[str, Any]:
        if get_spawning_popen() is not None:  # a worker being started: share the same memory
            return {"_values": self._values}
        return {"_values": list(self._values)}


class _LineStreamCore:
    """Everything but the torch base class, so that the sharding can be tested and used without torch."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        shuffle_blocks: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        block_bytes: int = 1 << 20,
        rank: int | None = None,
        world_size: int | None = None,
        on_bad_line: str = "skip",
        parse: Callable[[str], Any] = parse_path_label,
    ) -> None:
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"ShardedLineStream: no index file {self.path}")
        if on_bad_line not in ("skip", "error"):
            raise ValueError(f"ShardedLineStream: on_bad_line must be 'skip' or 'error', not {on_bad_line!r}")
        if block_bytes < 1:
            raise ValueError(f"ShardedLineStream: block_bytes must be positive, not {block_bytes}")
        self.shuffle_blocks = shuffle_blocks
        self.seed = seed
        self.drop_last = drop_last
        self.block_bytes = block_bytes
        self.rank = rank
        self.world_size = world_size
        self.on_bad_line = on_bad_line
        self.parse = parse
        self._shared = _SharedState()
        self._worker: int | None = None  # the DataLoader worker id this copy runs in, None in the parent
        self._counts: dict[tuple[int, int], np.ndarray] = {}  # (file size, blocks) -> lines per block

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle the block order for this epoch (call it on every rank, before iterating the loader)."""
        self._shared.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._shared.epoch

    @property
    def bad_lines(self) -> int:
        """Lines skipped as blank or malformed since the last set_epoch, in this process and its workers."""
        return self._shared.bad_lines

    def _plan(
        self, rank: int, world_size: int, worker: int, num_workers: int, epoch: int
    ) -> list[tuple[int, int, int]]:
        """(start, end, most lines) of each block this (rank, worker) reads this epoch, in reading order."""
        shards = world_size * num_workers
        size = os.stat(self.path).st_size
        bounds = _block_bounds(size, self.block_bytes, shards)
        n_blocks = len(bounds) - 1
        if self.shuffle_blocks:
            order = np.random.default_rng([self.seed, epoch]).permutation(n_blocks)
        else:
            order = np.arange(n_blocks)
        shard = rank * num_workers + worker
        limits = np.full(n_blocks, -1, dtype=np.int64)  # -1: no limit
        if self.drop_last and world_size > 1:
            key = (size, n_blocks)
            if key not in self._counts:
                self._counts = {key: count_block_lines(self.path, bounds)}
            counts = self._counts[key][order]  # lines per block, in dealing order
            owner_rank = (np.arange(n_blocks) % shards) // num_workers
            per_rank = np.bincount(owner_rank, weights=counts, minlength=world_size).astype(np.int64)
            quota = int(per_rank.min())
            mine = owner_rank == rank
            before = np.cumsum(counts * mine) - counts * mine  # this rank's lines dealt before each block
            limits = np.where(mine, np.clip(quota - before, 0, counts), -1)
        return [(bounds[order[j]], bounds[order[j] + 1], int(limits[j])) for j in range(shard, n_blocks, shards)]

    def shard(self, rank: int, world_size: int, worker: int = 0, num_workers: int = 1, epoch: int | None = None
              ) -> Iterator[Any]:  # fmt: skip
        """The parsed lines of one (rank, worker) share in one epoch (what __iter__ yields in that worker)."""
        epoch = self.epoch if epoch is None else epoch
        with open(self.path, "rb") as f:
            for start, end, limit in self._plan(rank, world_size, worker, num_workers, epoch):
                yield from self._read_block(f, start, end, limit)

    def _read_block(self, f: Any, start: int, end: int, limit: int) -> Iterator[Any]:
        if start >= end or limit == 0:
            return
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()  # the rest of a line that began in the block before: it is that block's
        else:
            f.seek(0)
        taken = bad = 0
        at = f.tell()  # then counted, not asked: tell() on every line costs as much as the parsing
        try:
            while at < end and taken != limit:
                raw = f.readline()
                if not raw:
                    break
                taken += 1
                at += len(raw)
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                    if not text.strip():
                        raise ValueError("blank line")
                    item = self.parse(text)
                except ValueError as exc:
                    if self.on_bad_line == "error":
                        number = _line_number(self.path, at - len(raw))
                        raise ValueError(f"{self.path}, line {number}: {exc}: {raw[:200]!r}") from None
                    bad += 1
                    continue
                yield item
        finally:
            if bad:
                self._shared.add_bad(self._worker, bad)

    def _iter_here(self) -> Iterator[Any]:
        from torch.utils.data import get_worker_info

        rank, world_size = _resolve_rank(self.rank, self.world_size)
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        self._worker = info.id if info is not None else None
        return self.shard(rank, world_size, worker, num_workers)


def _define_dataset() -> type:
    from torch.utils.data import IterableDataset

    class ShardedLineStream(_LineStreamCore, IterableDataset[Any]):
        """An IterableDataset over a `path label` file: each line once per epoch across all ranks and workers.

        ShardedLineStream(path, shuffle_blocks=True, seed=0, drop_last=False, block_bytes=1 MiB, rank=None,
        world_size=None, on_bad_line="skip", parse=parse_path_label). rank and world_size default to
        torch.distributed's, else $RANK and $WORLD_SIZE. on_bad_line="skip" skips blank or malformed lines and
        counts them (`bad_lines`, after the epoch); "error" raises ValueError naming the line number. `parse`
        turns a line (without its newline) into a sample; a ValueError from it marks the line as bad.
        See the module's docstring for how the file is split and how the remainder is handled.
        """

        def __iter__(self) -> Iterator[Any]:
            return self._iter_here()

    ShardedLineStream.__module__ = __name__
    ShardedLineStream.__qualname__ = "ShardedLineStream"
    return ShardedLineStream


_dataset_class: type | None = None


def __getattr__(name: str) -> Any:
    # The Dataset subclass is made on first use, so that `import dlprobe.fixes.line_stream` needs no torch.
    global _dataset_class
    if name == "ShardedLineStream":
        if _dataset_class is None:
            _dataset_class = _define_dataset()
        return _dataset_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
