"""The in-flight slot: a fixed binary layout each process keeps in inflight/<pid>.bin, and its reader.

A worker (or the training process) writes which dataset indices it is fetching into a small file (pwrite on
its descriptor: never a shared mapping, which a file cut short by someone else turns into a SIGBUS); the supervisor
reads the file whenever it needs to, even after the writer died, and takes a short or garbled file for no reading.
Updates go through a sequence counter (odd while an update of several fields is in progress, moved on by two with a
single field's) and a reader keeps only two agreeing copies with an even counter, never a half-written record.
This module is shared by both sides, so it imports neither torch nor anything heavy.
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Any

from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import INFLIGHT_SLOT_SUFFIX

MAGIC = b"DLPI"
VERSION = 1
SLOT_SIZE = 4096  # one page
MAX_INDICES = 256  # indices kept per batch; bigger batches keep the first ones plus the sample in flight
MAX_FAILED_INDICES = 64
NOT_AN_INT = -(2**63)  # an index that is not an int (a custom sampler's key) is stored as this

# A thread worker (torch's worker_method="thread") has a role of its own: it is no process, so nothing that reads
# a "worker" slot as a process (its pid, its death) may take it for one.
ROLE_MAIN, ROLE_WORKER, ROLE_THREAD_WORKER = 1, 2, 3
ROLES = {ROLE_MAIN: "main", ROLE_WORKER: "worker", ROLE_THREAD_WORKER: "thread-worker"}

# Fetch phases (what the process does with the batch it holds).
IDLE, INIT, GETITEM, COLLATE, DONE, ENDED = 0, 1, 2, 3, 4, 5
PHASES = {IDLE: "idle", INIT: "worker_init_fn", GETITEM: "getitem", COLLATE: "collate", DONE: "done", ENDED: "ended"}

# How the indices are to be read.
KIND_MAP, KIND_GETITEMS, KIND_ITERABLE, KIND_UNBATCHED = 0, 1, 2, 3
DATASET_KINDS = {KIND_MAP: "map", KIND_GETITEMS: "getitems", KIND_ITERABLE: "iterable", KIND_UNBATCHED: "unbatched"}

# The training loop's own state (main process only).
OUTSIDE, CREATING_ITERATOR, WAITING = 0, 1, 2
LOOP_STATES = {OUTSIDE: "outside", CREATING_ITERATOR: "creating-iterator", WAITING: "waiting-for-batch"}

HEADER = struct.Struct("<4sHHiiii")  # magic, version, role, pid, loader, worker, faulthandler signal
SEQ = struct.Struct("<Q")
FETCH = struct.Struct("<IIqdiidq")  # phase, kind, fetches, t_fetch, n, pos, t_sample, current index
SAMPLE = struct.Struct("<idq")  # pos, t_sample, current index: the one store made per sample
FAILED = struct.Struct("<IIqdiiq")  # phase, kind, fetch number, t_fetch, pos, n, current index
LOOP = struct.Struct("<Iiiqdq")  # state, loader, awaited worker, awaited task, since, batches received

OFF_HEADER = 0
OFF_SEQ = 24
OFF_FETCH = 32
OFF_BATCH_LEN = OFF_FETCH + 24
OFF_SAMPLE = OFF_FETCH + 28
OFF_FAILED = OFF_FETCH + FETCH.size  # 80
OFF_LOOP = OFF_FAILED + FAILED.size  # 120
OFF_INDICES = 160
OFF_FAILED_INDICES = OFF_INDICES + 8 * MAX_INDICES
INDICES = struct.Struct(f"<{MAX_INDICES}q")
FAILED_INDICES = struct.Struct(f"<{MAX_FAILED_INDICES}q")
assert OFF_LOOP + LOOP.size <= OFF_INDICES
assert OFF_FAILED_INDICES + FAILED_INDICES.size <= SLOT_SIZE
# A worker's last batches (task, start, collate start, end, first index), a ring in the page's spare tail: they
# survive a worker killed or stuck before its rows were sent as events (trace.json shows them). Zero in slots
# written before it existed, so no version change.
RECENT = struct.Struct("<qdddq")
MAX_RECENT = 32
OFF_RECENT_COUNT = OFF_FAILED_INDICES + FAILED_INDICES.size
OFF_RECENT = OFF_RECENT_COUNT + 8
assert OFF_RECENT + MAX_RECENT * RECENT.size <= SLOT_SIZE


def slot_path(run_dir: str | Path, pid: int) -> Path:
    return RunDir(run_dir).inflight_slot(pid)


def _index_list(values: tuple[int, ...], n: int, kind: int, first: int) -> list[int | None]:
    """The batch's indices as far as they were stored (None for an index that is not an int)."""
    if kind == KIND_ITERABLE:  # the first MAX_INDICES positions, as a map batch keeps its first indices
        return list(range(first, first + min(n, MAX_INDICES))) if first != NOT_AN_INT else []
    return [None if v == NOT_AN_INT else v for v in values[: min(n, len(values))]]


def decode(buf: bytes) -> dict[str, Any] | None:
    """A slot's bytes as plain data; None when it is not a slot: cut short (a file truncated by someone else, then
    partly written again by its process before it noticed), or holding values no writer stores (overwritten)."""
    if len(buf) < SLOT_SIZE or buf[:4] != MAGIC:
        return None
    _, version, role, pid, loader, worker, fh_signal = HEADER.unpack_from(buf, OFF_HEADER)
    if version != VERSION:
        return None
    phase, kind, fetches, t_fetch, n, pos, t_sample, current = FETCH.unpack_from(buf, OFF_FETCH)
    indices = INDICES.unpack_from(buf, OFF_INDICES)
    f_phase, f_kind, f_fetch, f_t, f_pos, f_n, f_current = FAILED.unpack_from(buf, OFF_FAILED)
    f_indices = FAILED_INDICES.unpack_from(buf, OFF_FAILED_INDICES)
    l_state, l_loader, l_worker, l_task, l_since, l_batches = LOOP.unpack_from(buf, OFF_LOOP)
    if (
        role not in ROLES
        or pid <= 0
        or phase not in PHASES
        or kind not in DATASET_KINDS
        or fetches < 0
        or n < 0
        or (f_fetch and (f_phase not in PHASES or f_kind not in DATASET_KINDS or f_n < 0))
        or (role == ROLE_MAIN and l_state not in LOOP_STATES)
    ):
        return None  # garbled: no index from it may be blamed
    slot: dict[str, Any] = {
        "pid": pid,
        "role": ROLES.get(role, "?"),
        "loader_id": loader if loader >= 0 else None,
        "worker_id": worker if worker >= 0 else None,
        "faulthandler_signal": fh_signal or None,
        "seq": SEQ.unpack_from(buf, OFF_SEQ)[0],
        "phase": PHASES.get(phase, "?"),
        "kind": DATASET_KINDS.get(kind, "?"),
        "fetches": fetches,
        "t_fetch": t_fetch or None,
        "t_sample": t_sample or None,
        "pos": pos if pos >= 0 and fetches else None,
        "batch_len": n,
        "index": None if current == NOT_AN_INT or fetches == 0 else current,
        "indices": _index_list(indices, n, kind, indices[0]) if fetches else [],
        "failed": None,
        "loop": None,
    }
    if f_fetch:
        slot["failed"] = {
            "phase": PHASES.get(f_phase, "?"),
            "kind": DATASET_KINDS.get(f_kind, "?"),
            "fetch": f_fetch,
            "t_fetch": f_t,
            "pos": f_pos if f_pos >= 0 else None,
            "batch_len": f_n,
            "index": None if f_current == NOT_AN_INT else f_current,
            "indices": _index_list(f_indices, f_n, f_kind, f_indices[0]),
        }
    (count,) = struct.unpack_from("<q", buf, OFF_RECENT_COUNT)
    slot["recent"] = [
        list(RECENT.unpack_from(buf, OFF_RECENT + (i % MAX_RECENT) * RECENT.size))
        for i in range(max(0, count - MAX_RECENT), count)
    ]
    if role == ROLE_MAIN:
        slot["loop"] = {
            "state": LOOP_STATES.get(l_state, "?"),
            "loader_id": l_loader if l_loader >= 0 else None,
            "awaited_worker": l_worker if l_worker >= 0 else None,
            "awaited_task": l_task if l_task >= 0 else None,
            "since": l_since or None,
            "batches": l_batches,
        }
    return slot


def read_slot(path: Path, retries: int = 50) -> dict[str, Any] | None:
    """A consistent snapshot of a slot: the sequence counter is even and unchanged around the read.

    If the writer keeps it odd (it died in the middle of an update) or never lets a read through, the last
    read is returned with "torn": True.
    """
    try:
        # never through a link; O_NONBLOCK: a FIFO under a slot's name must not block (pread then fails on it)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        buf, torn = b"", True
        for attempt in range(retries):
            # Two whole copies that agree, with an even counter inside: reading the counter on its own around
            # one copy was seen to pass torn snapshots here (the kernel's copy gives no ordering guarantee).
            buf = os.pread(fd, SLOT_SIZE, 0)
            again = os.pread(fd, SLOT_SIZE, 0)
            if len(buf) < OFF_SEQ + SEQ.size:
                break
            if buf == again and SEQ.unpack_from(buf, OFF_SEQ)[0] % 2 == 0:
                torn = False
                break
            if attempt >= 10:
                time.sleep(0.0005)  # let a busy writer finish its update
        slot = decode(buf)
        if slot is not None:
            slot["torn"] = torn
        return slot
    except OSError:
        return None
    finally:
        os.close(fd)


def read_all(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Every slot in a run directory, by pid (a thread worker's by its thread id, with "tid" set; its "pid" is the
    process it runs in)."""
    slots: dict[int, dict[str, Any]] = {}
    folder = RunDir(run_dir).inflight_dir
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return slots
    for name in names:
        pid = name.removesuffix(INFLIGHT_SLOT_SUFFIX)
        if name.endswith(INFLIGHT_SLOT_SUFFIX) and pid.isdigit():
            slot = read_slot(folder / name)
            if slot is not None:
                if slot["role"] == ROLES[ROLE_THREAD_WORKER]:
                    slot["tid"] = int(pid)
                slots[int(pid)] = slot
    return slots
