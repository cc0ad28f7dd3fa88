"""A file index for class-folder image trees: ImageFolder's samples without its walk, packed and cached on disk.

Before (minutes to hours on network storage for a million files: `os.walk` plus a check per file, and a list of
a million tuples that every forked worker slowly copies as it touches their reference counts)::

    dataset = torchvision.datasets.ImageFolder("/data/train", transform=tf)

After (one `os.scandir` per folder, class folders in parallel threads, no per-file `stat`; the result is three
numpy arrays, cached on disk and reloaded in well under a second while no folder changed)::

    from dlprobe.fixes import FileIndexDataset
    dataset = FileIndexDataset("/data/train", transform=tf)

`samples`, `imgs`, `targets`, `classes` and `class_to_idx` hold what ImageFolder's hold, in the same order.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, overload

import numpy as np

from dlprobe.fixes import cache_dir as layout

# torchvision.datasets.folder.IMG_EXTENSIONS; matched case-insensitively against the end of each file name
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
CACHE_FORMAT = 2
Listing = list[tuple[str, list[str]]]  # (folder relative to root, its file names), in ImageFolder's order


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dlprobe", "file-index")


class FileIndex:
    """(path, class index) pairs packed into numpy arrays: no Python object per file.

    A file is its folder (an index into `folders`, paths relative to root) and its name (a slice of one byte
    buffer). A forked DataLoader worker that reads `index[i]` touches only numpy buffers and a few folder
    strings, so its pages stay shared with the parent.
    """

    def __init__(self, root: str, classes: list[str], folders: list[str], arrays: dict[str, np.ndarray]) -> None:
        self.root = root
        self.classes = classes
        self.class_to_idx = {c: i for i, c in enumerate(classes)}
        self.folders = folders
        self._names = arrays["names"]  # uint8: every file name, os.fsencode'd, back to back
        self._offsets = arrays["offsets"]  # int64, len(self) + 1
        self._folder_of = arrays["folder_of"]  # int32, an index into folders per file
        self.targets = arrays["targets"]  # int64, one class index per file
        self.from_cache = False

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return {"names": self._names, "offsets": self._offsets, "folder_of": self._folder_of, "targets": self.targets}

    def __len__(self) -> int:
        return len(self.targets)

    def path(self, i: int) -> str:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"file index {i} out of range ({len(self)} files)")
        name = os.fsdecode(self._names[self._offsets[i] : self._offsets[i + 1]].tobytes())
        return os.path.join(self.root, self.folders[self._folder_of[i]], name)

    def __getitem__(self, i: int) -> tuple[str, int]:
        return self.path(i), int(self.targets[i])

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for i in range(len(self)):
            yield self[i]

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


class SampleView(Sequence[tuple[str, int]]):
    """A read-only `samples` list for code written against ImageFolder: `view[i] -> (path, target)`."""

    def __init__(self, index: FileIndex):
        self._index = index

    def __len__(self) -> int:
        return len(self._index)

    @overload
    def __getitem__(self, i: int) -> tuple[str, int]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, int]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, int] | list[tuple[str, int]]:
        if isinstance(i, slice):
            return [self._index[j] for j in range(*i.indices(len(self)))]
        return self._index[i]

    def __repr__(self) -> str:
        return f"<{len(self)} samples under {self._index.root!r}>"


def _scan_class(real_root: str, name: str, extensions: tuple[str, ...]) -> tuple[Listing, list[tuple[str, int]]]:
    """(folder relative to root, sorted file names) of one class in ImageFolder's order, and every folder's mtime.

    ImageFolder runs `sorted(os.walk(class_dir, followlinks=True))` and sorts the file names of each folder:
    folders in the order of their path strings, then files by name. os.walk calls a non-directory a file; so
    does this. DirEntry.is_dir() answers from the directory listing (d_type), so no file is stat'ed; folders
    are (one stat each, for the cache key).
    """
    listing: Listing = []
    mtimes: list[tuple[str, int]] = []
    pending = [name]
    while pending:
        rel = pending.pop()
        folder = os.path.join(real_root, rel)
        names = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:  # os.walk treats an entry it cannot classify as a file
                        is_dir = False
                    if is_dir:
                        pending.append(os.path.join(rel, entry.name))
                    elif entry.name.lower().endswith(extensions):
                        names.append(entry.name)
            mtimes.append((folder, os.stat(folder).st_mtime_ns))
        except OSError:  # noqa: S112 - os.walk (hence ImageFolder) skips a folder it cannot list
            continue
        names.sort()
        listing.append((rel, names))
    listing.sort(key=lambda item: item[0])
    return listing, mtimes


def _pack(root: str, classes: list[str], scans: list[Listing]) -> FileIndex:
    folders: list[str] = []
    counts: list[int] = []
    folder_class: list[int] = []
    names: list[str] = []
    for target, listing in enumerate(scans):
        for rel, folder_names in listing:
            if folder_names:
                folders.append(rel)
                counts.append(len(folder_names))
                folder_class.append(target)
                names.extend(folder_names)
    joined = "".join(names)
    buf = os.fsencode(joined)  # one call for a million names; per name only when some are not ASCII
    sizes = map(len, names) if len(buf) == len(joined) else (len(os.fsencode(n)) for n in names)
    offsets = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(sizes, dtype=np.int64, count=len(names)), out=offsets[1:])
    folder_of = np.repeat(np.arange(len(folders), dtype=np.int32), counts)
    arrays: dict[str, np.ndarray] = {
        "names": np.frombuffer(buf, dtype=np.uint8),
        "offsets": offsets,
        "folder_of": folder_of,
        "targets": np.asarray(folder_class, dtype=np.int64)[folder_of],
    }
    return FileIndex(root, classes, folders, arrays)


def _cache_file(cache_dir: str, real_root: str, extensions: tuple[str, ...]) -> str:
    key = hashlib.sha256(json.dumps([CACHE_FORMAT, real_root, sorted(extensions)]).encode()).hexdigest()[:24]
    return os.path.join(cache_dir, f"{key}.npz")


def _still_valid(saved_mtimes: dict[str, int]) -> bool:
    for folder, mtime in saved_mtimes.items():
        try:
            if os.stat(folder).st_mtime_ns != mtime:
                return False
        except OSError:
            return False
    return True


def _load_cache(path: str, root: str, real_root: str) -> FileIndex | None:
    """The cached index if every folder it read (the root included) still has the same mtime, else None. The file
    is read only if it is the user's own (opened without following a link, owned by this uid, not writable by
    others): anyone else's file could name other files as the dataset's samples."""
    try:
        with open(path, "rb", opener=layout.entry_opener) as f, np.load(f, allow_pickle=False) as saved:
            meta = json.loads(saved["meta"].tobytes().decode())
            if meta["root"] != real_root or not _still_valid(meta["mtimes"]):
                return None
            arrays = {k: saved[k] for k in ("names", "offsets", "folder_of", "targets")}
            index = FileIndex(root, meta["classes"], meta["folders"], arrays)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, layout.UnsafeCacheError) as exc:  # damaged or foreign: rebuild, say so
        warnings.warn(f"dlprobe.fixes: ignoring the unreadable file index cache {path} ({exc}); rebuilding it",
                      stacklevel=3)  # fmt: skip
        return None
    index.from_cache = True
    return index


def _trusted_cache_dir(cache_dir: str) -> bool:
    """Whether the cache folder is the user's own and only theirs to write (or does not exist yet); otherwise the
    index is built without a cache, with a warning naming why."""
    try:
        layout.check_dir(Path(cache_dir), is_default=False)
    except FileNotFoundError:
        return True
    except layout.UnsafeCacheError as exc:
        warnings.warn(f"dlprobe.fixes: not using the file index cache: {exc}", stacklevel=3)
        return False
    return True


def _remove_stale_tmp(path: str) -> None:
    """Temporary files of this cache file whose builder process no longer exists (killed while writing)."""
    folder, name = os.path.split(path)
    pattern = re.compile(rf"{re.escape(name)}\.(\d+)\.tmp")
    for entry in os.scandir(folder):
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        try:
            os.kill(int(match[1]), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):  # another builder removed it first
                os.unlink(entry.path)
        except OSError:  # noqa: S110 - alive, owned by another user: still writing
            pass


def _save_cache(path: str, index: FileIndex, real_root: str, mtimes: dict[str, int]) -> None:
    meta = json.dumps({"root": real_root, "classes": index.classes, "folders": index.folders, "mtimes": mtimes})
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if not _trusted_cache_dir(os.path.dirname(path)):
            return
        # A private temporary file renamed into place: a reader never sees half an index, and concurrent builders
        # (ranks of one job) each write their own file and the last rename wins with identical content. It is
        # named by the builder's pid, so the files of builders killed mid-write are known and removed here.
        _remove_stale_tmp(path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # left by an earlier process with this pid
        try:
            with os.fdopen(layout.create_private(Path(tmp)), "wb") as f:
                arrays: dict[str, Any] = {"meta": np.frombuffer(meta.encode(), dtype=np.uint8), **index.arrays}
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # never opened (read-only folder): nothing to remove
                os.unlink(tmp)
            raise
    except OSError as exc:  # a read-only or full cache folder costs the next start a rebuild, not this one
        warnings.warn(f"dlprobe.fixes: could not cache the file index in {path} ({exc})", stacklevel=3)


def build_file_index(
    root: str | os.PathLike[str],
    extensions: Iterable[str] = IMG_EXTENSIONS,
    workers: int = 16,
    cache_dir: str | os.PathLike[str] | None = None,
    cache: bool = True,
    allow_empty: bool = False,
) -> FileIndex:
    """Index `root/<class>/**/<file>` as ImageFolder does, without a per-file stat, cached on disk.

    classes: the sorted sub-folders of root. Files: every non-folder under a class folder (symlinks followed)
    whose name ends with one of `extensions` (any case), in ImageFolder's order. Class folders are listed in
    `workers` threads (os.scandir releases the GIL while it waits on storage). The cache (in `cache_dir`,
    default ~/.cache/dlprobe/file-index) is keyed by root's real path and the extensions, and used only while
    the modification time of every folder it read is unchanged (adding or removing a file changes its folder's).
    It is used only when the folder and the file are the user's own and not writable by others (a warning says
    why otherwise, and the index is built without it).

    Raises FileNotFoundError like ImageFolder: no class folder in root, or (unless allow_empty) a class folder
    with no file of an allowed extension.
    """
    root_str = os.path.expanduser(os.fspath(root))
    real_root = os.path.realpath(root_str)
    exts = tuple(e.lower() for e in ([extensions] if isinstance(extensions, str) else extensions))
    folder = os.fspath(cache_dir or default_cache_dir())
    cache_path = _cache_file(folder, real_root, exts) if cache and _trusted_cache_dir(folder) else None
    if cache_path is not None:
        cached = _load_cache(cache_path, root_str, real_root)
        if cached is not None:
            return cached

    root_mtime = os.stat(real_root).st_mtime_ns  # before the listing: a change during the build invalidates it
    with os.scandir(real_root) as it:
        classes = sorted(e.name for e in it if e.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {root_str}.")
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(classes)))) as pool:
        scans = list(pool.map(lambda c: _scan_class(real_root, c, exts), classes))

    empty = [c for c, (listing, _) in zip(classes, scans, strict=True) if not any(names for _, names in listing)]
    if empty and not allow_empty:
        raise FileNotFoundError(
            f"Found no valid file for the classes {', '.join(empty)}. Supported extensions are: {', '.join(exts)}"
        )
    index = _pack(root_str, classes, [listing for listing, _ in scans])
    if cache_path is not None:
        mtimes = {real_root: root_mtime} | {folder: m for _, folder_mtimes in scans for folder, m in folder_mtimes}
        _save_cache(cache_path, index, real_root, mtimes)
    return index


def pil_loader(path: str) -> Any:
    """Open an image as RGB with Pillow, as torchvision's default loader does."""
    from PIL import Image  # only when an image is loaded: the index itself needs no Pillow

    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def _define_dataset() -> type:
    from torch.utils.data import Dataset as TorchDataset

    class FileIndexDataset(TorchDataset[Any]):
        """ImageFolder from a `build_file_index` index: the same samples, targets and classes, no torchvision.

        `samples` (also `imgs`) is a read-only sequence of (path, class index), `targets` a numpy int64 array;
        `loader(path)` opens a sample (Pillow RGB by default). Other arguments go to build_file_index.
        """

        def __init__(
            self,
            root: str | os.PathLike[str],
            transform: Callable[[Any], Any] | None = None,
            target_transform: Callable[[int], Any] | None = None,
            loader: Callable[[str], Any] = pil_loader,
            extensions: Iterable[str] = IMG_EXTENSIONS,
            **index_options: Any,
        ) -> None:
            self.root = os.fspath(root)
            self.index = build_file_index(root, extensions=extensions, **index_options)
            self.transform = transform
            self.target_transform = target_transform
            self.loader = loader
            self.classes = self.index.classes
            self.class_to_idx = self.index.class_to_idx
            self.targets = self.index.targets
            self.samples = SampleView(self.index)
            self.imgs = self.samples

        def __len__(self) -> int:
            return len(self.index)

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            path, target = self.index[i]
            sample = self.loader(path)
            if self.transform is not None:
                sample = self.transform(sample)
            return sample, (self.target_transform(target) if self.target_transform is not None else target)

    # pickle (spawn workers) finds the class as dlprobe.fixes.file_index.FileIndexDataset, through __getattr__
    FileIndexDataset.__module__ = __name__
    FileIndexDataset.__qualname__ = "FileIndexDataset"
    return FileIndexDataset


_dataset_class: type | None = None


def __getattr__(name: str) -> Any:
    # The Dataset subclass is made on first use so that build_file_index works without torch.
    global _dataset_class
    if name == "FileIndexDataset":
        if _dataset_class is None:
            _dataset_class = _define_dataset()
        return _dataset_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
