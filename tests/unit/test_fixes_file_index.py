"""dlprobe.fixes.file_index: the same samples as an ImageFolder-style walk, a cache that notices changes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dlprobe.fixes import FileIndexDataset, build_file_index
from dlprobe.fixes.file_index import IMG_EXTENSIONS
from tests.conftest import dead_pid


def has_file_allowed_extension(filename: str, extensions: tuple[str, ...]) -> bool:
    return filename.lower().endswith(extensions)


def image_folder_walk(
    root: str, extensions: tuple[str, ...] = IMG_EXTENSIONS
) -> tuple[list[str], list[tuple[str, int]]]:
    """torchvision's find_classes + make_dataset, written out: the reference the index must equal."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for index, name in enumerate(classes):
        for folder, _, names in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for fname in sorted(names):
                path = os.path.join(folder, fname)
                if has_file_allowed_extension(path, extensions):
                    samples.append((path, index))
    return classes, samples


def make_tree(root: Path) -> None:
    files = [
        "cat/b.jpg", "cat/a.JPG", "cat/c.Png", "cat/notes.txt", "cat/sub/z.jpeg", "cat/sub-x/y.png",
        "cat/sub/deeper/q.webp", "cat/a.jpg.bak", "dog/1.png", "dog/10.png", "dog/2.png", "dog/.hidden.png",
        "dog/x/y/z/deep.bmp", "dog/café.png", "Zebra/img.TIFF", "bird/readme.md", "bird/chick.jpg",
    ]  # fmt: skip
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"")
    (root / "cat" / "folder.jpg").mkdir()  # a folder with an image's name is walked into, never a sample
    (root / "cat" / "folder.jpg" / "inside.png").write_bytes(b"")
    (root / "loose.jpg").write_bytes(b"")  # a file at the top is no class


def test_index_equals_an_image_folder_walk(tmp_path):
    root = tmp_path / "tree"
    make_tree(root)
    classes, samples = image_folder_walk(str(root))
    index = build_file_index(root, cache_dir=tmp_path / "cache")
    assert index.classes == classes == ["Zebra", "bird", "cat", "dog"]
    assert list(index) == samples
    # sorted(os.walk(...)) orders folders by their path string: "sub" < "sub-x" < "sub/deeper" ('-' < '/')
    assert [s[0].rsplit("/tree/", 1)[1] for s in samples][:9] == [
        "Zebra/img.TIFF", "bird/chick.jpg", "cat/a.JPG", "cat/b.jpg", "cat/c.Png", "cat/folder.jpg/inside.png",
        "cat/sub/z.jpeg", "cat/sub-x/y.png", "cat/sub/deeper/q.webp",
    ]  # fmt: skip
    assert list(index.targets) == [t for _, t in samples]


def test_dataset_has_image_folders_attributes_and_loads_with_the_given_loader(tmp_path):
    root = tmp_path / "tree"
    make_tree(root)
    classes, samples = image_folder_walk(str(root))
    ds = FileIndexDataset(str(root), loader=os.path.basename, target_transform=str, cache_dir=tmp_path / "cache")
    assert ds.classes == classes and ds.class_to_idx == {c: i for i, c in enumerate(classes)}
    assert list(ds.samples) == list(ds.imgs) == samples and ds.samples[-2:] == samples[-2:]
    assert list(ds.targets) == [t for _, t in samples] and len(ds) == len(samples)
    assert ds[2] == ("a.JPG", "2")
    again = pickle.loads(pickle.dumps(ds))  # spawn workers get the dataset by pickle
    assert list(again.samples) == samples


def test_second_build_comes_from_the_cache_until_a_folder_changes(tmp_path):
    root = tmp_path / "tree"
    make_tree(root)
    cache = tmp_path / "cache"
    first = build_file_index(root, cache_dir=cache)
    second = build_file_index(root, cache_dir=cache)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert list(second) == list(first)
    (root / "cat" / "sub" / "deeper" / "new.png").write_bytes(b"")  # a nested folder changes, not the class's
    third = build_file_index(root, cache_dir=cache)
    assert third.from_cache is False
    assert list(third) == image_folder_walk(str(root))[1]
    (root / "newclass").mkdir()
    (root / "newclass" / "n.jpg").write_bytes(b"")
    fourth = build_file_index(root, cache_dir=cache)
    assert fourth.from_cache is False and "newclass" in fourth.classes
    assert (
        build_file_index(root, cache_dir=cache, extensions=[".png"], allow_empty=True).from_cache is False
    )  # its own key


def cached_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A generated tree, its cache folder, and the one cache file a first build wrote there."""
    root, cache = tmp_path / "tree", tmp_path / "cache"
    make_tree(root)
    build_file_index(root, cache_dir=cache)
    [cached] = list(cache.iterdir())
    return root, cache, cached


def test_a_damaged_cache_is_rebuilt_with_a_warning(tmp_path):
    root, cache, cached = cached_tree(tmp_path)
    cached.write_bytes(b"not an npz")
    with pytest.warns(UserWarning, match="unreadable file index cache"):
        index = build_file_index(root, cache_dir=cache)
    assert index.from_cache is False and list(index) == image_folder_walk(str(root))[1]


def test_no_class_folder_and_empty_class_raise_like_image_folder(tmp_path):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="Couldn't find any class folder in .*flat"):
        build_file_index(tmp_path / "flat", cache=False)
    (tmp_path / "flat" / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="Found no valid file for the classes empty"):
        build_file_index(tmp_path / "flat", cache=False)
    assert len(build_file_index(tmp_path / "flat", cache=False, allow_empty=True)) == 0


def test_a_builder_killed_while_writing_the_cache_leaves_nothing_after_the_next_build(tmp_path):
    root, cache, cached = cached_tree(tmp_path)
    dead = dead_pid()
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (cache / f"{cached.name}.{dead}.tmp").write_bytes(b"half an index")  # its builder was killed
        (cache / f"{cached.name}.{living.pid}.tmp").write_bytes(b"being written")  # another rank, still writing
        (root / "newclass").mkdir()
        (root / "newclass" / "n.jpg").write_bytes(b"")
        assert build_file_index(root, cache_dir=cache).from_cache is False
        assert sorted(p.name for p in cache.iterdir()) == sorted([cached.name, f"{cached.name}.{living.pid}.tmp"])
    finally:
        living.kill()
        living.wait()
