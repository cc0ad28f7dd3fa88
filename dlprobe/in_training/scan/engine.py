"""Inside the target: the takeover that scans the loader's dataset with a pool of restartable worker processes.

Work goes out in chunks of indices sized to take ~50 ms each (one message per chunk, two chunks in flight per
worker), and comes back as one message per chunk holding only signatures and problems, never the samples.
A worker that dies or overruns the per-sample limit is killed and replaced; the shared (index, start time)
array says which sample it was on, and the rest of its chunks go back in the queue.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.loader_registry import flush_all, probe_id
from dlprobe.in_training.scan.context import lightning_role, other_loaders
from dlprobe.in_training.scan.paths import path_for, path_in_message
from dlprobe.in_training.scan.plan import ScanPlan, ScanSetupError, dataset_type_of, make_plan
from dlprobe.in_training.scan.sample_check import Signature, compare
from dlprobe.in_training.scan.worker import STARTING, Prepared, map_worker, stream_worker
from dlprobe.rundir.schema import (
    EV_SCAN_BAD,
    EV_SCAN_END,
    EV_SCAN_ERROR,
    EV_SCAN_PROGRESS,
    EV_SCAN_SKIPPED,
    EV_SCAN_START,
    TAKEOVER_LOADER_ENV,
)
from dlprobe.scan.options import ScanOptions

TAKEOVER_FUNCTION = "dlprobe.in_training.scan.engine:take_over"
TARGET_CHUNK_S = 0.05  # long enough that messages cost nothing, short enough that a lost chunk costs little
FIRST_CHUNK = 4  # until the first answer tells how long a sample takes
MAX_CHUNK = 512
IN_FLIGHT = 2  # chunks per worker: one being loaded, one waiting, so a worker never idles on a round trip
POLL_S = 0.1
PROGRESS_EVERY_S = 0.25
MIN_STARTUP_LIMIT_S = 120.0  # spawn workers import torch and the script again; never count that as a sample
MAX_UNATTRIBUTED_DEATHS = 3
UNRECOVERABLE = ("exception", "crash", "timeout", "none")  # no sample came back: nothing else can be said


class StopFlag:
    """Set by Ctrl-C; the loop stops at its next turn and still reports what it found."""

    def __init__(self) -> None:
        self.set = False

    def __call__(self, _signum: int, _frame: Any) -> None:
        self.set = True


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker died"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
            return f"worker killed by {sig.name} ({signal.strsignal(sig)})"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with code {exitcode}"


@dataclass
class PoolSlot:
    number: int
    process: Any
    conn: Any
    chunks: deque[list[int]] = field(default_factory=deque)


class Scanner:
    """Drives the worker pool over the plan and collects what is bad, emitting events as it goes."""

    def __init__(self, plan: ScanPlan, emit: Callable[..., None], stop: StopFlag) -> None:
        self.plan = plan
        self.emit = emit
        self.stop = stop
        self.state = plan.context.RawArray("d", 2 * plan.workers)
        self.slots: list[PoolSlot | None] = [None] * plan.workers
        self.cursor = 0
        self.requeued: deque[int] = deque()
        self.per_sample_s: float | None = None
        self.groups: dict[Signature, array[int]] = {}
        self.bad: dict[int, dict[str, Any]] = {}
        self.done = 0
        self.unattributed_deaths = 0
        self.stream_end: int | None = None
        self.stream_note: str | None = None
        self.interrupted = False
        self.last_progress = 0.0

    # --- workers -----------------------------------------------------------------------------------------
    def _start_worker(self, number: int) -> None:
        plan = self.plan
        parent_conn, child_conn = plan.context.Pipe(duplex=True)
        job = Prepared(
            plan.dataset, self.state, number, number, plan.workers, plan.base_seed, plan.worker_init_fn, plan.shapes
        )
        self.state[2 * number + 1] = time.monotonic()
        self.state[2 * number] = STARTING
        if plan.iterable:
            target, args = stream_worker, (job, child_conn, os.getpid(), plan.stream_start, plan.stream_stop)
        else:
            target, args = map_worker, (job, child_conn, os.getpid())  # type: ignore[assignment]
        process = plan.context.Process(target=target, args=args, name=f"dlprobe-scan-{number}", daemon=True)
        try:
            process.start()
        except Exception as exc:
            parent_conn.close()
            raise ScanSetupError(
                f"the dataset cannot be handed to {plan.start_method} worker processes: {type(exc).__name__}: {exc}",
                hint=f"{plan.start_method} pickles the dataset, its worker_init_fn and everything they hold; make "
                "them picklable (no lambdas, open files or locks), or pass --start-method fork to share them as "
                "they are",
            ) from None
        finally:
            child_conn.close()
        self.slots[number] = PoolSlot(number, process, parent_conn)

    def _live(self) -> list[PoolSlot]:
        return [slot for slot in self.slots if slot is not None]

    def _retire(self, slot: PoolSlot, kill: bool) -> None:
        if kill:
            slot.process.kill()
        slot.process.join(5)
        slot.conn.close()
        self.slots[slot.number] = None

    def shutdown(self) -> None:
        for slot in self._live():
            with contextlib.suppress(OSError):
                slot.conn.send(None)
        deadline = time.monotonic() + 1.0
        for slot in self._live():
            slot.process.join(max(0.0, deadline - time.monotonic()))
            self._retire(slot, kill=slot.process.is_alive())

    # --- work --------------------------------------------------------------------------------------------
    def _remaining(self) -> int:
        return len(self.requeued) + len(self.plan.indices) - self.cursor

    def _next_chunk(self) -> list[int]:
        size = FIRST_CHUNK
        if self.per_sample_s is not None:
            size = int(min(MAX_CHUNK, max(1.0, TARGET_CHUNK_S / max(self.per_sample_s, 1e-7))))
        # Near the end, smaller chunks so that every worker keeps busy until the last sample.
        size = max(1, min(size, self._remaining() // (self.plan.workers * IN_FLIGHT)))
        chunk: list[int] = []
        while self.requeued and len(chunk) < size:
            chunk.append(self.requeued.popleft())
        if len(chunk) < size and self.cursor < len(self.plan.indices):
            end = min(len(self.plan.indices), self.cursor + size - len(chunk))
            chunk.extend(self.plan.indices[self.cursor : end])
            self.cursor = end
        return chunk

    def _dispatch(self) -> None:
        for slot in self._live():
            while len(slot.chunks) < IN_FLIGHT and self._remaining():
                chunk = self._next_chunk()
                slot.conn.send(chunk)
                slot.chunks.append(chunk)

    # --- results -----------------------------------------------------------------------------------------
    def record(self, index: int, kind: str, detail: str, where: str | None = None) -> None:
        entry = self.bad.get(index)
        if entry is not None:
            if entry["kind"] in UNRECOVERABLE:
                return
            detail = f"{detail}; also {entry['detail']}"  # shape/dtype outrank nan, which they already explain
        entry = {"index": index, "kind": kind, "detail": detail}
        if where:
            entry["where"] = where
        # A stream position is not an index into any list the dataset holds; only the message can name a file.
        path = path_in_message(detail) if self.plan.iterable else path_for(self.plan.dataset, index, detail)
        if path:
            entry["path"] = path
        self.bad[index] = entry
        self.emit(EV_SCAN_BAD, **entry)

    def _on_message(self, slot: PoolSlot, message: tuple[Any, ...]) -> None:
        tag = message[0]
        if tag == "init_error":
            raise ScanSetupError(
                f"the loader's worker_init_fn failed in a scan worker: {message[1]}",
                hint=f"it raised at {message[2]}" if message[2] else "",
            )
        if tag == "stream_end":
            self.stream_end = int(message[1])
            return
        _, groups, problems, elapsed, count = message
        if not self.plan.iterable:
            slot.chunks.popleft()
            if count:
                per = elapsed / count
                self.per_sample_s = per if self.per_sample_s is None else 0.7 * self.per_sample_s + 0.3 * per
        for signature, indices in groups.items():
            self.groups.setdefault(signature, array("q")).extend(indices)
        for index, kind, detail, where in problems:
            self.record(index, kind, detail, where)
        self.done += count

    def _drain(self, slot: PoolSlot) -> None:
        try:
            while slot.conn.poll():
                self._on_message(slot, slot.conn.recv())
        except (EOFError, OSError):  # noqa: S110 - the worker is gone: _lost() below reports it
            pass

    def _lost(self, slot: PoolSlot, kind: str, detail: str) -> None:
        """The worker in `slot` is gone: blame its current sample, requeue the rest of its chunks, replace it."""
        at = self.state[2 * slot.number]
        if self.stop.set:  # Ctrl-C reaches the whole process group: a worker it ended is not a bad sample
            self.slots[slot.number] = None
            return
        if at == STARTING:
            raise ScanSetupError(
                f"a scan worker died while starting ({detail}) under the {self.plan.start_method} start method",
                hint="see the error printed above; with spawn the script's classes must be importable from it",
            )
        current = int(at) if at >= 0 else None
        if current is None:
            self.unattributed_deaths += 1
            if self.unattributed_deaths > MAX_UNATTRIBUTED_DEATHS:
                raise ScanSetupError(f"scan workers keep dying between samples ({detail})")
        else:
            self.record(current, kind, detail)
            self.done += 1
        if self.plan.iterable:
            self.stream_note = f"the stream cannot be read past position {current}: reading it again would stop there"
            self.slots[slot.number] = None
            return
        for chunk in slot.chunks:
            self.requeued.extend(i for i in chunk if i != current)
        slot.chunks.clear()
        self.slots[slot.number] = None
        if not self.stop.set:
            self._start_worker(slot.number)

    def _check_time_limits(self) -> None:
        now = time.monotonic()
        startup_limit = max(MIN_STARTUP_LIMIT_S, self.plan.timeout_s)
        for slot in self._live():
            at, since = self.state[2 * slot.number], self.state[2 * slot.number + 1]
            if at >= 0 and now - since > self.plan.timeout_s:
                self._retire(slot, kill=True)
                self._lost(slot, "timeout", f"no result after {self.plan.timeout_s:g} s; the worker was killed")
            elif at == STARTING and now - since > startup_limit:
                raise ScanSetupError(f"a scan worker did not start within {startup_limit:g} s")

    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            self.emit(EV_SCAN_PROGRESS, done=self.done, bad=len(self.bad))

    def _finished(self) -> bool:
        if self.plan.iterable:
            return self.stream_end is not None or not self._live()
        return not self._remaining() and not any(slot.chunks for slot in self._live())

    def run(self) -> None:
        for number in range(self.plan.workers):
            self._start_worker(number)
        while not self._finished():
            if self.stop.set:
                self.interrupted = True
                break
            if not self.plan.iterable:
                self._dispatch()
            live = self._live()
            ready = set(wait([s.conn for s in live] + [s.process.sentinel for s in live], timeout=POLL_S))
            for slot in live:
                if slot.conn in ready or slot.process.sentinel in ready:
                    self._drain(slot)
                    if not slot.process.is_alive() and self.slots[slot.number] is slot:
                        if self.plan.iterable and self.stream_end is not None:
                            break
                        self._retire(slot, kill=False)
                        self._lost(slot, "crash", describe_exit(slot.process.exitcode))
            self._check_time_limits()
            self._progress()
        self._flag_odd_signatures()
        self._progress(force=True)

    def _flag_odd_signatures(self) -> None:
        """Samples whose shapes or dtypes differ from the majority's, once every signature is known."""
        if len(self.groups) < 2:
            return
        majority = max(self.groups, key=lambda sig: len(self.groups[sig]))
        count, total = len(self.groups[majority]), sum(len(v) for v in self.groups.values())
        for signature, indices in self.groups.items():
            difference = compare(signature, majority)
            if difference is None or (difference[0] == "shape" and not self.plan.shapes):
                continue
            kind, what = difference
            for index in indices:
                self.record(index, kind, f"{what} (as in {count} of {total} samples)")


_scanned_datasets: set[int] = set()  # id() of every dataset checked in this process: each is checked once
_codes: list[int] = []


def take_over(loader: Any) -> int | None:
    """The takeover function: scan the loader's dataset (and, by default, every other loader), then end the process.

    Returns None only to let Lightning's sanity check go on to the training loader, which it builds only after it.
    """
    options = ScanOptions.from_env()
    role = lightning_role()
    _codes.append(scan_loader(loader, options, role))
    if options.every_loader:
        # Loaders the script built but has not iterated yet (a training loader after a validation loader): checked
        # here from the objects themselves, so the script never runs a step of its own loop.
        for other in _unchecked_loaders():
            if max(_codes) >= 2:
                break
            _codes.append(scan_loader(other, options, None, asked_for=False))
        if max(_codes) < 2 and (role or "").startswith("Lightning's sanity-check"):
            number = probe_id(loader)
            os.environ[TAKEOVER_LOADER_ENV] = str((number or 0) + 1)  # take over the next loader iterated
            return None
    code = max(_codes)
    flush_all()
    # Ending here, not by SystemExit: a framework around the loop (Lightning's Trainer.fit) would catch it, tear
    # down and print dozens of lines of traceback. Events are written unbuffered, so nothing is lost.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _unchecked_loaders() -> list[Any]:
    from torch.utils.data import DataLoader

    found = []
    for obj in gc.get_objects():
        if issubclass(type(obj), DataLoader) and id(obj.dataset) not in _scanned_datasets:
            _scanned_datasets.add(id(obj.dataset))
            found.append(obj)
    return found


def scan_loader(loader: Any, options: ScanOptions, role: str | None, asked_for: bool = True) -> int:
    """Scan the loader's dataset, emitting the scan's events. Returns the exit code.

    A loader found alive but never iterated may be one the script does not use as it stands (an empty test split):
    if it cannot be scanned, that is said, and the loaders already checked still count.
    """
    _scanned_datasets.add(id(loader.dataset))
    log = get_log()

    def emit(ev: str, **fields: Any) -> None:
        if log is not None:
            log.emit(ev, **fields)

    stop = StopFlag()
    signal.signal(signal.SIGINT, stop)
    started = time.monotonic()
    scanner: Scanner | None = None
    try:
        plan = make_plan(loader, options)
        emit(
            EV_SCAN_START,
            dataset_type=plan.dataset_type,
            total=plan.total,
            selected=plan.selected,
            iterable=plan.iterable,
            workers=plan.workers,
            start_method=plan.start_method,
            shapes=plan.shapes,
            shape_note=plan.shape_note,
            timeout_s=plan.timeout_s,
            loader=probe_id(loader),
            role=role,
            other_loaders=[] if options.every_loader else other_loaders(loader),
        )
        scanner = Scanner(plan, emit, stop)
        scanner.run()
        if plan.iterable and scanner.done == 0 and not scanner.bad and not scanner.interrupted:
            raise ScanSetupError(
                f"the dataset is empty: the {plan.dataset_type} stream yielded no samples",
                hint="check the paths, filters or shards the script's IterableDataset reads",
            )
    except ScanSetupError as exc:
        if not asked_for:
            dataset = dataset_type_of(loader.dataset)
            emit(EV_SCAN_SKIPPED, dataset_type=dataset, message=exc.message, hint=exc.hint)
            return 0
        emit(EV_SCAN_ERROR, message=exc.message, hint=exc.hint)
        return 2
    finally:
        if scanner is not None:
            scanner.shutdown()
    emit(
        EV_SCAN_END,
        scanned=scanner.done,
        duration_s=round(time.monotonic() - started, 3),
        interrupted=scanner.interrupted,
        note=scanner.stream_note,
    )
    if scanner.interrupted:
        return 130
    return 1 if scanner.bad else 0
