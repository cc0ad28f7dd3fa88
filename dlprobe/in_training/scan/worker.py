"""The scan worker process: loads the samples it is sent, checks each, and answers once per chunk.

Before each sample it writes (start time, index) into a shared array, so the parent knows which sample a worker
was on when it died or stopped answering without any message per sample.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any, cast

from dlprobe.frames import innermost_user_frame
from dlprobe.in_training.scan.sample_check import Signature, check_sample

NO_INDEX = -1.0  # in the shared state: this reader holds no index now
STARTING = -2.0
FLUSH_EVERY_S = 0.05  # a stream worker reports at least this often, so progress stays live
PR_SET_PDEATHSIG = 1


def describe_exception(exc: BaseException) -> tuple[str, str | None]:
    """('ValueError: corrupt record', 'dataset.py:42') with the innermost frame of the user's own code in the
    traceback (not PIL's or the standard library's raise), else its innermost frame."""
    try:
        message = str(exc).strip()
    except Exception:
        message = "<unprintable message>"
    detail = f"{type(exc).__qualname__}: {message}" if message else type(exc).__qualname__
    frame = innermost_user_frame(traceback.extract_tb(exc.__traceback__))
    where = f"{frame.filename}:{frame.lineno}" if frame else None
    return detail[:2000], where


class Prepared:
    """Everything a worker needs, picklable for spawn and forkserver."""

    def __init__(
        self,
        dataset: Any,
        state: Any,
        slot: int,
        worker_id: int,
        num_workers: int,
        base_seed: int,
        init_fn: Callable[[int], Any] | None,
        shapes: bool,
    ) -> None:
        self.dataset = dataset
        self.state = state
        self.slot = slot
        self.worker_id = worker_id
        self.num_workers = num_workers
        self.base_seed = base_seed
        self.init_fn = init_fn
        self.shapes = shapes


def parent_gone(parent_pid: int) -> bool:
    """The scan that started this worker has ended. Under fork and spawn the scan is the worker's parent; under
    forkserver the parent is the fork server (which ends with the scan), so the scan's own pid is asked instead."""
    if os.getppid() == parent_pid:
        return False
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user now has that pid: the scan is gone
        return True
    return False


def _die_with_parent(parent_pid: int) -> None:
    """A worker stuck in a read must not outlive a scan that was killed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        # The parent's death, that is the scan's (fork, spawn) or the fork server's, which ends with the scan.
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:  # noqa: S110 - no prctl (not Linux, no libc): the check below still ends an orphan
        pass
    if parent_gone(parent_pid):  # it died before prctl took effect
        os._exit(0)


def _set_up(job: Prepared, parent_pid: int) -> None:
    """What torch's own worker loop does before its first sample: one thread, seeds, worker info, init_fn."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _die_with_parent(parent_pid)
    import torch

    torch.set_num_threads(1)
    seed = job.base_seed + job.worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    from torch.utils.data._utils import worker as torch_worker

    # get_worker_info() inside the dataset then answers as in a real DataLoader worker; if this fails, the worker
    # fails to start (an init_error the scan reports), rather than scan a worker-sharded dataset unlike training.
    torch_worker._worker_info = torch_worker.WorkerInfo(
        id=job.worker_id, num_workers=job.num_workers, seed=seed, dataset=job.dataset
    )
    try:
        import numpy as np
    except ImportError:  # noqa: S110 - no numpy: nothing of numpy's to seed
        pass
    else:
        generate_state = cast(Callable[[int, int], list[int]], torch_worker._generate_state)
        np.random.seed(generate_state(job.base_seed, job.worker_id))
    if job.init_fn is not None:
        job.init_fn(job.worker_id)


def _start(job: Prepared, conn: Any, parent_pid: int) -> bool:
    try:
        _set_up(job, parent_pid)
    except BaseException as exc:
        detail, where = describe_exception(exc)
        conn.send(("init_error", detail, where))
        return False
    job.state[2 * job.slot] = NO_INDEX
    return True


def map_worker(job: Prepared, conn: Any, parent_pid: int) -> None:
    """Answer chunks of indices until the parent sends None or goes away."""
    if not _start(job, conn, parent_pid):
        return
    dataset, state, shapes = job.dataset, job.state, job.shapes
    at, since = 2 * job.slot, 2 * job.slot + 1
    clock = time.monotonic
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        started = time.perf_counter()
        groups: dict[Signature, list[int]] = {}
        problems: list[tuple[int, str, str, str | None]] = []
        for index in chunk:
            state[since] = clock()  # time first: the parent must never pair this index with an old start time
            state[at] = index
            try:
                sample = dataset[index]
            except BaseException as exc:  # noqa: B036 - a sample that calls sys.exit() is a bad sample too
                detail, where = describe_exception(exc)
                problems.append((index, "exception", detail, where))
                continue
            signature, issue = check_sample(sample, shapes)
            del sample
            if issue is not None:
                problems.append((index, issue.kind, issue.detail, None))
            if signature is not None:
                groups.setdefault(signature, []).append(index)
        state[at] = NO_INDEX
        conn.send(("chunk", groups, problems, time.perf_counter() - started, len(chunk)))


def stream_worker(job: Prepared, conn: Any, parent_pid: int, start: int, stop: int | None) -> None:
    """Walk an IterableDataset in order; positions before `start` are read but not checked."""
    if not _start(job, conn, parent_pid):
        return
    state, shapes = job.state, job.shapes
    at, since = 2 * job.slot, 2 * job.slot + 1
    clock = time.monotonic
    groups: dict[Signature, list[int]] = {}
    problems: list[tuple[int, str, str, str | None]] = []
    position = checked = 0
    last_flush = clock()
    failures_in_a_row = 0
    iterator = iter(job.dataset)
    while stop is None or position < stop:
        state[since] = clock()
        state[at] = position
        try:
            sample = next(iterator)
        except StopIteration:
            break
        except BaseException as exc:  # noqa: B036
            # A generator is finished after raising; a hand-written iterator may go on, so ask it again.
            if position >= start:
                detail, where = describe_exception(exc)
                problems.append((position, "exception", detail, where))
                checked += 1
            position += 1
            failures_in_a_row += 1
            if failures_in_a_row >= 100:
                break
            continue
        failures_in_a_row = 0
        if position >= start:
            signature, issue = check_sample(sample, shapes)
            if issue is not None:
                problems.append((position, issue.kind, issue.detail, None))
            if signature is not None:
                groups.setdefault(signature, []).append(position)
            checked += 1
        del sample
        position += 1
        if clock() - last_flush >= FLUSH_EVERY_S:
            conn.send(("chunk", groups, problems, 0.0, checked))
            groups, problems, checked = {}, [], 0
            last_flush = clock()
    state[at] = NO_INDEX
    conn.send(("chunk", groups, problems, 0.0, checked))
    conn.send(("stream_end", position))
