"""dlprobe.fixes.line_stream: every line exactly once per epoch across ranks and real DataLoader workers."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from dlprobe.fixes import ShardedLineStream
from dlprobe.fixes.line_stream import count_block_lines


def write_index(path: Path, lines: int, trailing_newline: bool = True) -> list[tuple[str, int]]:
    rows = [(f"images/n{i:07d} with space.jpg", i % 1000) for i in range(lines)]
    text = "\n".join(f"{p} {label}" for p, label in rows)
    path.write_text(text + ("\n" if trailing_newline and rows else ""))
    return rows


def every_share(stream, world: int, workers: int, epoch: int = 0) -> dict[int, list]:
    return {r: [x for w in range(workers) for x in stream.shard(r, world, w, workers, epoch)] for r in range(world)}


@pytest.mark.parametrize(
    ("world", "workers", "lines", "block_bytes"),
    [(1, 1, 1000, 1 << 20), (2, 3, 1001, 997), (3, 2, 10_007, 4096), (4, 4, 7, 64), (5, 1, 0, 100), (8, 3, 2501, 1)],
)
def test_each_line_once_per_epoch_across_ranks_and_workers(tmp_path, world, workers, lines, block_bytes):
    rows = write_index(tmp_path / "index.txt", lines, trailing_newline=lines % 2 == 0)
    stream = ShardedLineStream(tmp_path / "index.txt", block_bytes=block_bytes, seed=7)
    for epoch in (0, 1):
        got = [x for share in every_share(stream, world, workers, epoch).values() for x in share]
        assert sorted(got) == rows  # no line lost, none twice


def test_real_dataloader_workers_on_explicit_ranks_cover_the_file_once(tmp_path):
    rows = write_index(tmp_path / "index.txt", 3001)
    got = []
    for rank in range(3):
        stream = ShardedLineStream(tmp_path / "index.txt", block_bytes=2000, rank=rank, world_size=3)
        loader = DataLoader(stream, batch_size=50, num_workers=2)
        got += [(p, int(t)) for paths, labels in loader for p, t in zip(paths, labels, strict=True)]
    assert len(got) == len(rows) and sorted(got) == rows


def test_set_epoch_reaches_persistent_workers_and_changes_order_not_coverage(tmp_path):
    rows = write_index(tmp_path / "index.txt", 2000)
    stream = ShardedLineStream(tmp_path / "index.txt", block_bytes=500, seed=1, rank=0, world_size=1)
    loader = DataLoader(stream, batch_size=100, num_workers=2, persistent_workers=True)
    orders = []
    for epoch in range(2):
        stream.set_epoch(epoch)
        orders.append([p for paths, _ in loader for p in paths])
    assert orders[0] != orders[1]
    assert sorted(orders[0]) == sorted(orders[1]) == sorted(p for p, _ in rows)
    again = ShardedLineStream(tmp_path / "index.txt", block_bytes=500, seed=1, rank=0, world_size=1)
    assert [x[0] for x in again.shard(0, 1, 0, 1, epoch=1)] == [x[0] for x in stream.shard(0, 1, 0, 1, epoch=1)]


def test_drop_last_gives_every_rank_the_same_count_and_drops_only_the_excess(tmp_path):
    rows = write_index(tmp_path / "index.txt", 1003)
    for world, workers, block_bytes in [(3, 2, 300), (4, 1, 1 << 20), (2, 5, 77)]:
        stream = ShardedLineStream(tmp_path / "index.txt", block_bytes=block_bytes, drop_last=True, seed=2)
        full = ShardedLineStream(tmp_path / "index.txt", block_bytes=block_bytes, seed=2)
        for epoch in (0, 1):
            shares = every_share(stream, world, workers, epoch)
            counts = [len(s) for s in shares.values()]
            full_counts = [len(s) for s in every_share(full, world, workers, epoch).values()]
            assert len(set(counts)) == 1, counts
            assert counts[0] == min(full_counts)  # what the smallest rank has, no less
            got = [x for s in shares.values() for x in s]
            assert len(set(got)) == len(got) and set(got) <= set(rows)


def test_block_line_counts_match_what_the_readers_read(tmp_path):
    write_index(tmp_path / "index.txt", 999, trailing_newline=False)
    stream = ShardedLineStream(tmp_path / "index.txt", block_bytes=333, shuffle_blocks=False)
    bounds = stream._plan(0, 1, 0, 1, 0)
    counts = count_block_lines(str(tmp_path / "index.txt"), [b[0] for b in bounds] + [bounds[-1][1]])
    with open(tmp_path / "index.txt", "rb") as f:
        read = [sum(1 for _ in stream._read_block(f, start, end, -1)) for start, end, _ in bounds]
    assert list(counts) == read and sum(read) == 999


def test_bad_lines_are_skipped_and_counted_or_raise_with_the_line_number(tmp_path):
    index = tmp_path / "index.txt"
    index.write_text("a.jpg 1\n\nb.jpg 2\nno-label\n   \nc.jpg x\nd.jpg 4\n")
    stream = ShardedLineStream(index, rank=0, world_size=1)
    got = sorted(tuple(x) for x in DataLoader(stream, batch_size=None, num_workers=2))
    assert got == [("a.jpg", 1), ("b.jpg", 2), ("d.jpg", 4)]
    assert stream.bad_lines == 4  # counted in the workers, read in the parent
    stream.set_epoch(1)
    assert stream.bad_lines == 0
    strict = ShardedLineStream(index, rank=0, world_size=1, on_bad_line="error")
    with pytest.raises(ValueError, match=r"index\.txt, line 2: blank line"):
        list(strict)
    parsed = ShardedLineStream(index, rank=0, world_size=1, parse=str.split)
    assert list(parsed) == [["a.jpg", "1"], ["b.jpg", "2"], ["no-label"], ["c.jpg", "x"], ["d.jpg", "4"]]
    assert parsed.bad_lines == 2  # only the blank ones: parse accepted the rest


def test_rank_and_world_come_from_torchrun_environment(tmp_path, monkeypatch):
    rows = write_index(tmp_path / "index.txt", 100)
    monkeypatch.setenv("WORLD_SIZE", "2")
    got = []
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        got.append(list(ShardedLineStream(tmp_path / "index.txt", block_bytes=100)))
    assert got[0] and got[1] and sorted(got[0] + got[1]) == rows


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no index file"):
        ShardedLineStream(tmp_path / "missing.txt")
    (tmp_path / "index.txt").write_text("a 1\n")
    with pytest.raises(ValueError, match="on_bad_line"):
        ShardedLineStream(tmp_path / "index.txt", on_bad_line="ignore")
    with pytest.raises(ValueError, match="rank 2 is not within world_size 2"):
        list(ShardedLineStream(tmp_path / "index.txt", rank=2, world_size=2))
    assert collections.Counter(ShardedLineStream(tmp_path / "index.txt")) == {("a", 1): 1}


def test_spawned_persistent_workers_see_set_epoch_and_report_their_bad_lines(tmp_path):
    rows = write_index(tmp_path / "index.txt", 500)
    with open(tmp_path / "index.txt", "a") as f:
        f.write("no-label\n")
    stream = ShardedLineStream(tmp_path / "index.txt", block_bytes=300, rank=0, world_size=1)
    loader = DataLoader(stream, batch_size=None, num_workers=2, multiprocessing_context="spawn",
                        persistent_workers=True)  # fmt: skip
    orders = []
    for epoch in range(2):
        stream.set_epoch(epoch)
        orders.append([tuple(x) for x in loader])
        assert stream.bad_lines == 1
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1]) == rows
