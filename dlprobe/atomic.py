"""The one place dlprobe opens the files it writes and the run-directory files it reads back, so that a link or a
file planted in a directory never redirects them (a `report.json.tmp -> ~/.bashrc`, a `stderr.log` linked to a
private key).

- A whole file is written atomically: its text goes to a temporary file created exclusively and without following
  links (`O_CREAT|O_EXCL|O_NOFOLLOW`, a name no one can guess ahead), then replaces the file by `rename`, which
  replaces a link as it finds it and never writes through it. A reader (a browser, CI, a second dlprobe) never sees
  half a file.
- A stream (samples.jsonl, a log) or an append is opened without following a link, and a file with a second name
  (a hard link) is not emptied.
- A read refuses a link and anything but a regular file (a FIFO would block the report for ever).

New files are readable by group and others only where the directory lets them in (a private run directory keeps its
files private; a directory the user shares shares them)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class LinkRefused(OSError):
    """A path dlprobe would have had to follow a link (or read a non-file) to open."""


def _refuse(path: str | os.PathLike[str], what: str) -> LinkRefused:
    return LinkRefused(errno.ELOOP, what, str(path))


def file_mode(directory: str | os.PathLike[str]) -> int:
    """0600, plus read for group/others where they may enter the directory (the umask still applies)."""
    try:
        dir_mode = os.stat(directory).st_mode
    except OSError:
        return 0o600
    return 0o600 | (0o040 if dir_mode & 0o010 else 0) | (0o004 if dir_mode & 0o001 else 0)


def create_new_fd(path: str | os.PathLike[str]) -> int:
    """A new file at `path`: FileExistsError when anything (a file, a link) is already there."""
    return _open_new(Path(path))


def _open_new(path: Path, flags: int = 0) -> int:
    """A new file at `path`, created exclusively without following a link: FileExistsError if anything is there."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | flags, file_mode(path.parent))
    except FileExistsError:
        if path.is_symlink():
            raise _refuse(path, "a symbolic link is in the way, not followed") from None
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically, through a fresh temporary file beside it."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = _open_new(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:  # noqa: S110 - the write's own error is the one to raise
            pass
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, encoding: str | None = None) -> None:
    """Write `text` to `path` atomically; `encoding` None is the locale's, as `Path.write_text`'s."""
    import locale

    write_bytes_atomic(path, text.encode(encoding or locale.getpreferredencoding(False)))


def create_fd(path: str | os.PathLike[str]) -> int:
    """`path` opened empty for writing (a stream, a log): a link there is refused, never followed; an existing
    regular file is emptied only when it has no other name (a hard link to someone's file is refused, not cut)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | _NOFOLLOW, file_mode(Path(path).parent))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "a symbolic link, not followed") from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            if info.st_nlink > 1:
                raise _refuse(path, "a hard link to another file, not written")
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_file(path: str | os.PathLike[str], mode: str = "w") -> IO[str]:
    """`create_fd` as a text file object."""
    return open(create_fd(path), mode)  # noqa: SIM115 - the caller closes it


def create_binary(path: str | os.PathLike[str], buffering: int = -1) -> IO[bytes]:
    """`create_fd` as a binary file object."""
    return open(create_fd(path), "wb", buffering=buffering)  # noqa: SIM115 - the caller closes it


def append_fd(path: str | os.PathLike[str]) -> int:
    """`path` opened to append (created when missing), never through a link."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, file_mode(Path(path).parent))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "a symbolic link, not followed") from None
        raise


def open_read(path: str | os.PathLike[str]) -> IO[bytes]:
    """A run-directory file opened to read: a link is refused, not followed; so is anything but a regular file."""
    try:
        # O_NONBLOCK: a FIFO planted under a file's name must not block the open; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "a symbolic link, not followed") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(path, "not a regular file, not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")  # noqa: SIM115 - the caller closes it


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    with open_read(path) as f:
        return f.read()


def read_text(path: str | os.PathLike[str], errors: str = "strict") -> str:
    return read_bytes(path).decode("utf-8", errors=errors)


def real_subdir(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` is a real directory (not a link to one elsewhere): a run directory's hangs/, stacks/,
    faults/ and inflight/ are read only then."""
    try:
        return stat.S_ISDIR(os.lstat(directory).st_mode)
    except OSError:
        return False
