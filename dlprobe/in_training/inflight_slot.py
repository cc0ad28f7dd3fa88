"""One process's in-flight slot: its record kept in a page of the process's own memory, each update written to the
slot's file with pwrite (layout in rundir/inflight_format.py), and the checks that stop it once someone else damaged
the file. inflight.py makes the slots (the training process's, each worker's) and calls them from the fetchers."""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlprobe.in_training import probe_errors
from dlprobe.rundir.handle import inflight_ref
from dlprobe.rundir.inflight_format import (
    COLLATE,
    DONE,
    FAILED,
    FAILED_INDICES,
    FETCH,
    GETITEM,
    HEADER,
    IDLE,
    KIND_GETITEMS,
    KIND_ITERABLE,
    KIND_MAP,
    LOOP,
    MAGIC,
    MAX_FAILED_INDICES,
    MAX_INDICES,
    MAX_RECENT,
    NOT_AN_INT,
    OFF_BATCH_LEN,
    OFF_FAILED,
    OFF_FAILED_INDICES,
    OFF_FETCH,
    OFF_HEADER,
    OFF_INDICES,
    OFF_LOOP,
    OFF_RECENT,
    OFF_RECENT_COUNT,
    OFF_SAMPLE,
    OFF_SEQ,
    RECENT,
    ROLE_MAIN,
    ROLE_THREAD_WORKER,
    SAMPLE,
    SEQ,
    SLOT_SIZE,
    VERSION,
)

if TYPE_CHECKING:
    from dlprobe.in_training import worker_batches

_PHASE = struct.Struct("<I")
# bound once: the per-sample path is a handful of C calls
_pack_seq = SEQ.pack_into
_pack_sample = SAMPLE.pack_into
_pack_phase = _PHASE.pack_into
_pack_loop = LOOP.pack_into
_pack_recent = RECENT.pack_into
_pack_count = struct.Struct("<q").pack_into
_now = time.time
_index_structs: dict[int, struct.Struct] = {}


def _as_int(value: Any) -> int:
    if type(value) is int:
        return value
    try:
        return int(value.__index__())
    except Exception:
        return NOT_AN_INT


# How often a slot checks that its file is still the one it writes (cut short, replaced, removed, overwritten): a
# fstat, a stat of its name and a read of its header, at a fetch's start or a loop update at most this often.
CHECK_INTERVAL = 0.5


class SlotDamaged(OSError):
    """A slot's file is no longer what its process wrote: cut short, replaced, removed or overwritten by another."""


def _mute(fd: int, data: Any, offset: int) -> int:
    return 0


class Slot:
    """One process's in-flight record: kept in a page of its own memory, each update written to the slot's file.

    Written with pwrite on the file's descriptor, never through a shared mapping: a store into a mapped page past
    the file's end is a SIGBUS that kills the training, and anyone who can write the run directory can cut the file
    short (`truncate -s 0 RUN/inflight/*.bin`). A pwrite past the end only extends the file again. A damaged file is
    noticed (CHECK_INTERVAL) and the slot stops writing it, recorded once as a probe error; its process goes on."""

    def __init__(self, path: Path, role: int, loader_id: int = -1, worker_id: int = -1) -> None:
        # A thread worker's slot is named by its thread id (the file), and its header holds the process's pid: the
        # process is what py-spy reads and a signal reaches.
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = self.buf = bytearray(SLOT_SIZE)  # the record itself; the file gets a copy of each update
        HEADER.pack_into(buf, OFF_HEADER, MAGIC, VERSION, role, os.getpid(), loader_id, worker_id, 0)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            # Its blocks are allocated now, so no later update meets a full disk (it would only stop the slot).
            try:
                os.posix_fallocate(fd, 0, SLOT_SIZE)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, SLOT_SIZE)
            if os.pwrite(fd, buf, 0) != SLOT_SIZE:
                raise SlotDamaged("the slot's page was written short")
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        # Kept open for the process's life, even once stopped: another thread may be inside a write with it.
        self.fd = fd
        self.path = path
        self.identity = (st.st_dev, st.st_ino)
        self.role, self.loader_id, self.worker_id = role, loader_id, worker_id
        self.write: Callable[[int, Any, int], int] = os.pwrite  # _mute once the file is damaged
        self.stopped = False
        self.next_check = _now() + CHECK_INTERVAL
        view = self.view = memoryview(buf)
        self._seq_view = view[OFF_SEQ : OFF_SEQ + SEQ.size]
        self._phase_view = view[OFF_SEQ : OFF_FETCH + _PHASE.size]  # the counter and the fetch's phase
        self._sample_view = view[OFF_SEQ : OFF_SAMPLE + SAMPLE.size]  # the counter through the sample in flight
        self._loop_view = view[OFF_SEQ : OFF_LOOP + LOOP.size]  # the counter through the loop's state
        self.seq = 0
        self.phase = IDLE
        self.fetches = 0
        self.failed_kept = False
        self.fh_signal = 0
        self.t_begin = 0.0  # the current fetch's start and first index, for worker_batches
        self.first = NOT_AN_INT
        self.recent = 0  # batches put in the ring so far
        self.recorder: worker_batches.WorkerBatches | None = None  # a worker's per-batch rows; None in the loop

    # --- writing the file ---------------------------------------------------------------------------------------
    # An update of several fields goes out under an odd counter, then the even one (two writes); a single field's
    # update (a sample, a phase, the loop's state) goes out with the next even counter in one write, and the
    # reader's two agreeing copies keep it whole. The counter moves on every update, as the readers expect.

    def _out(self, view: Any, offset: int) -> None:
        try:
            self.write(self.fd, view, offset)
        except OSError as exc:  # the file system refused the write (full, gone read-only): stop, never raise
            self.stop(exc)

    def _update(self, start: int, end: int) -> None:
        """Bytes [start, end) of the record, already packed, out to the file under an odd counter."""
        self.seq += 1
        SEQ.pack_into(self.buf, OFF_SEQ, self.seq)
        if start == OFF_SEQ + SEQ.size:
            self._out(self.view[OFF_SEQ:end], OFF_SEQ)
        else:
            self._out(self._seq_view, OFF_SEQ)
            self._out(self.view[start:end], start)
        self.seq += 1
        SEQ.pack_into(self.buf, OFF_SEQ, self.seq)
        self._out(self._seq_view, OFF_SEQ)

    def _label(self) -> tuple[str, str]:
        if self.role == ROLE_MAIN:
            return "inflight.slot.main", "the training process"
        kind = "thread-worker" if self.role == ROLE_THREAD_WORKER else "worker"
        return (
            f"inflight.slot.loader{self.loader_id}.{kind}{self.worker_id}",
            f"{kind} {self.worker_id} (loader {self.loader_id})",
        )

    def stop(self, exc: BaseException) -> None:
        """No more writes to the file (its process goes on; the rows of worker_batches too), recorded once."""
        if self.stopped:
            return
        self.stopped = True
        self.write = _mute
        where, who = self._label()
        lost = (
            "--hang-timeout cannot see the loop waiting for a batch, and reports lack the indices it held"
            if self.role == ROLE_MAIN
            else "hang and crash reports for it lack the indices it held"
        )
        probe_errors.record(where, exc, f"in-flight recording stopped in {who} from then on: {lost}")

    def check(self, now: float) -> None:
        """Stop if the slot's file is no longer this slot's: cut short, replaced or removed, or overwritten."""
        self.next_check = now + CHECK_INTERVAL
        if self.stopped:
            return
        name = inflight_ref(self.path.name)
        try:
            st = os.fstat(self.fd)
            try:
                named = os.stat(self.path, follow_symlinks=False)
                now_named = (named.st_dev, named.st_ino)
            except FileNotFoundError:
                now_named = None
            if st.st_nlink == 0 or now_named != self.identity:
                what = "removed" if now_named is None else "replaced by another file"
                raise SlotDamaged(f"its slot file {name} was {what}")
            if st.st_size < SLOT_SIZE:
                raise SlotDamaged(
                    f"its slot file {name} was truncated: {st.st_size} of its {SLOT_SIZE} bytes are there"
                )
            if os.pread(self.fd, OFF_SEQ, 0) != self.view[:OFF_SEQ]:
                raise SlotDamaged(f"its slot file {name} was overwritten")
        except OSError as exc:
            self.stop(exc)

    # --- the record ------------------------------------------------------------------------------------------

    def set_faulthandler_signal(self, signum: int) -> None:
        self.fh_signal = signum
        struct.pack_into("<i", self.buf, OFF_HEADER + 20, signum)
        self._update(OFF_HEADER + 20, OFF_SEQ)

    # set_phase, sample and loop run on every batch or sample (the loop: twice per batch): one write each.
    def set_phase(self, phase: int) -> None:
        buf = self.buf
        seq = self.seq + 2
        self.seq = seq
        _pack_seq(buf, OFF_SEQ, seq)
        _pack_phase(buf, OFF_FETCH, phase)
        try:
            self.write(self.fd, self._phase_view, OFF_SEQ)
        except OSError as exc:
            self.stop(exc)
        self.phase = phase

    def set_batch_len(self, n: int) -> None:
        struct.pack_into("<i", self.buf, OFF_BATCH_LEN, n)
        self._update(OFF_FETCH, OFF_BATCH_LEN + 4)

    def begin(self, kind: int, indices: Any, first: int | None = None) -> bool:
        """A new batch; `indices` are the sampler's indices (map) or None (iterable: `first` stream position).

        True when it recorded the batch's first sample as the one in flight too (map and iterable batches whose first
        index is known): the fetch then records samples from the second on, one write fewer per batch."""
        if self.phase in (GETITEM, COLLATE) and not self.failed_kept:
            self._keep_failed()  # the previous fetch never finished: it raised inside the dataset or collate
        self.fetches += 1
        values: Any
        if kind == KIND_ITERABLE:
            values = [first if first is not None else NOT_AN_INT]
            n = len(indices) if isinstance(indices, Sequence) else 1
        elif isinstance(indices, (list, tuple, range)) or (
            hasattr(indices, "__len__") and hasattr(indices, "__getitem__")
        ):
            n = len(indices)
            values = indices[:MAX_INDICES]
        else:  # a one-shot iterable of indices: never iterate it here; the per-sample records still come
            n, values = 0, []
        k = len(values)
        packer = _index_structs.get(k)
        if packer is None:
            packer = _index_structs[k] = struct.Struct(f"<{k}q")
        now = _now()
        if now >= self.next_check:
            self.check(now)
        # A batched fetch (__getitems__) gives no per-sample records: which index it is on is unknown until
        # the error path finds out, so the first index must not pose as the one in flight.
        first = _as_int(values[0]) if k else NOT_AN_INT
        current = first if kind != KIND_GETITEMS else NOT_AN_INT
        self.t_begin, self.first = now, first
        first_sample = k > 0 and kind in (KIND_MAP, KIND_ITERABLE)
        buf = self.buf
        FETCH.pack_into(buf, OFF_FETCH, GETITEM, kind, self.fetches, now, n, 0 if first_sample else -1, now, current)
        try:  # ints, numpy ints and integer tensors pack as they are
            packer.pack_into(buf, OFF_INDICES, *values)
        except (struct.error, TypeError):
            packer.pack_into(buf, OFF_INDICES, *[_as_int(v) for v in values])
        self._update(OFF_FETCH, OFF_INDICES + 8 * k)
        self.phase = GETITEM
        return first_sample

    def sample(self, pos: int, index: Any) -> None:
        buf = self.buf
        seq = self.seq + 2
        self.seq = seq
        _pack_seq(buf, OFF_SEQ, seq)
        _pack_sample(buf, OFF_SAMPLE, pos, _now(), index if type(index) is int else _as_int(index))
        try:
            self.write(self.fd, self._sample_view, OFF_SEQ)
        except OSError as exc:
            self.stop(exc)

    def _keep_failed(self) -> None:
        buf = self.buf
        phase, kind, fetches, t_fetch, n, pos, _t_sample, current = FETCH.unpack_from(buf, OFF_FETCH)
        first = struct.unpack_from(f"<{MAX_FAILED_INDICES}q", buf, OFF_INDICES)
        FAILED.pack_into(buf, OFF_FAILED, phase, kind, fetches, t_fetch, pos, n, current)
        FAILED_INDICES.pack_into(buf, OFF_FAILED_INDICES, *first)
        self.seq += 1
        SEQ.pack_into(buf, OFF_SEQ, self.seq)
        self._out(self._seq_view, OFF_SEQ)
        self._out(self.view[OFF_FAILED : OFF_FAILED + FAILED.size], OFF_FAILED)
        self._out(self.view[OFF_FAILED_INDICES : OFF_FAILED_INDICES + FAILED_INDICES.size], OFF_FAILED_INDICES)
        self.seq += 1
        SEQ.pack_into(buf, OFF_SEQ, self.seq)
        self._out(self._seq_view, OFF_SEQ)
        self.failed_kept = True  # keep the first failure: it is the one the training loop raises

    def keep_recent(self, task: int, start: float, collate: float, end: float, first: int) -> None:
        """A worker's finished batch: the phase DONE, its row in the ring of the last MAX_RECENT and the count that
        shows it, in one write from the counter to the row (a write costs about the same for 12 bytes or 4 KiB)."""
        buf = self.buf
        count = self.recent
        at = OFF_RECENT + (count % MAX_RECENT) * RECENT.size
        _pack_recent(buf, at, task, start, collate, end, first)
        self.recent = count + 1
        _pack_count(buf, OFF_RECENT_COUNT, count + 1)
        seq = self.seq + 2
        self.seq = seq
        _pack_seq(buf, OFF_SEQ, seq)
        _pack_phase(buf, OFF_FETCH, DONE)
        self.phase = DONE
        try:
            self.write(self.fd, self.view[OFF_SEQ : at + RECENT.size], OFF_SEQ)
        except OSError as exc:
            self.stop(exc)

    def loop(self, state: int, loader_id: int = -1, worker: int = -1, task: int = -1, batches: int = 0) -> None:
        buf = self.buf
        seq = self.seq + 2
        self.seq = seq
        now = _now()
        _pack_seq(buf, OFF_SEQ, seq)
        _pack_loop(buf, OFF_LOOP, state, loader_id, worker, task, now, batches)
        try:
            self.write(self.fd, self._loop_view, OFF_SEQ)
        except OSError as exc:
            self.stop(exc)
        if now >= self.next_check:
            self.check(now)
