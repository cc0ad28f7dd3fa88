"""One atomic write: the text goes to `<name>.tmp` beside the file, then replaces it, so a reader (a browser, CI, a
second dlprobe) never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str, encoding: str | None = None) -> None:
    """Write `text` to `path` atomically; `encoding` None is the locale's, as `Path.write_text`'s."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding=encoding)
    os.replace(tmp, target)
