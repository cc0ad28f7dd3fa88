"""The history rows of an offline W&B run, read from its own `run-ID.wandb` file: wandb's transaction log (LevelDB's
log format: 32 KiB blocks of checksummed records, after a 7-byte `:W&B` header), each record one of wandb's own
protobuf `Record`s, parsed with wandb's generated classes. wandb 0.31 ships no reader for offline runs in Python."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

HEADER_LEN = 7
BLOCK_LEN = 32768
RECORD_HEADER_LEN = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    if data[:4] != b":W&B":
        raise ValueError("not a W&B transaction log")
    out: list[bytes] = []
    pending = b""
    pos = HEADER_LEN
    while pos + RECORD_HEADER_LEN <= len(data):
        left = BLOCK_LEN - pos % BLOCK_LEN
        if left < RECORD_HEADER_LEN:
            pos += left  # the block's tail is padding
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + RECORD_HEADER_LEN])
        pos += RECORD_HEADER_LEN
        chunk = data[pos : pos + length]
        pos += length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
            pending = b""
        elif kind == 0 and length == 0:
            pos += BLOCK_LEN - pos % BLOCK_LEN if pos % BLOCK_LEN else 0
    return out


def history(run_file: Path) -> list[dict[str, Any]]:
    """Every history row the run logged, as {key: value} with `_step` among them."""
    from wandb.proto import wandb_internal_pb2

    rows: list[dict[str, Any]] = []
    for payload in _payloads(run_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json)
        rows.append(row)
    return rows


def run_file(wandb_dir: Path) -> Path:
    """The one offline run's transaction log under WANDB_DIR."""
    (found,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    return found
