"""Remedies the findings recommend, ready to import in a training script: `from dlprobe.fixes import ...`.

Each remedy lives in its own module and loads only when asked for, so `import dlprobe.fixes` costs nothing and
never imports the CLI's dependencies (rich, typer); torch is imported only by the classes that are Datasets.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_EXPORTS = {
    "PackedRecords": "records",  # copy-on-write-safe records (cow-growth)
    "PackedMapping": "mapping",  # copy-on-write-safe dict of records, looked up by key (cow-growth)
    "shm_array": "shm_cache",  # one read-only array in /dev/shm, shared by every process and run (spawn-copy)
    "build_file_index": "file_index",  # class-folder image trees without os.walk + stat (slow-start)
    "FileIndexDataset": "file_index",
    "ShardedLineStream": "line_stream",  # every line once per epoch across ranks and workers (iterable-duplicates)
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dlprobe.fixes' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dlprobe.fixes.{module}"), name)
