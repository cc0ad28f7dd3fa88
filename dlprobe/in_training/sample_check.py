"""Before a sample is blamed: load the index a worker failed on again, alone, in a throw-away child process.

When a worker's exception reaches the training loop ("Caught OSError in DataLoader worker process 2"), the worker's
in-flight slot says which index it was on. The training process then forks a child that loads `dataset[index]` once
with nothing else reading (the workers are let go idle first), and, if that fails too, one index the worker loaded
fine just before (a control): a sample at fault fails alone while its neighbour loads; state the workers share or
exhaust (a handle opened before the fork, a pool of readers, descriptors) loads alone, or fails on every index.

The training is unchanged: the child writes nothing (its stdout and stderr go to /dev/null), ends with os._exit (no
atexit handler, no flushed buffer of the parent's), is killed past a time limit, and whatever it does (crash, hang,
raise) stays in it; the parent only waits, bounded, and writes one `sample_check` event. What the loaded code does
stays in the child too: it loads inside a sandbox (in_training/sandbox.py: no network, every file read-only, the
training's streams and sockets closed), or not at all ("not verified", with the reason); a failure the sandbox may
have caused, or one of another type than the worker's, blames nothing. No child is forked where the script would
see it (in_training/quiet_fork.py: its at-fork handlers, its SIGCHLD handler) or with `--no-isolated-checks`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import json
import os
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, cast

from dlprobe.in_training import batch_compare, detached, probe_errors, quiet_fork, quiet_signals, sandbox
from dlprobe.in_training.event_log import get_log
from dlprobe.redact import redact_text
from dlprobe.rundir.inflight_format import read_slot, slot_path
from dlprobe.rundir.schema import (
    EV_SAMPLE_CHECK,
    RUN_DIR_ENV,
    SAMPLE_CHECK_FAILS,
    SAMPLE_CHECK_FAILS_ANY,
    SAMPLE_CHECK_LOADS,
    SAMPLE_CHECK_UNVERIFIED,
)
from dlprobe.torch_text import caught_in_worker_process

# torch's wrapper for an exception raised in a worker (torch/_utils.py ExceptionWrapper.reraise)
MAX_CHECKS = 3  # per process: a loop that catches errors and goes on must not fork a child per batch
IDLE_WAIT_S = 5.0  # how long the workers get to finish what they were loading before the check
LOAD_LIMIT_S = 10.0  # one child, both loads: a slower load is "not verified", never a verdict
_BUSY = ("getitem", "collate", "worker_init_fn")
QUIET_S = 0.3

_checked: set[tuple[int, int]] = set()


def check_worker_error(loader_id: int, epoch: int, iterator: Any, exc: BaseException, threads: bool = False) -> None:
    """A worker's exception reached the loop: load its index alone and record the outcome (never raises)."""
    caught = caught_in_worker_process(str(exc))
    if caught is None or os.environ.get(RUN_DIR_ENV) is None:
        return
    head = {"loader": loader_id, "epoch": epoch, "worker_id": caught[1], "exception": caught[0]}
    if threads or len(_checked) >= MAX_CHECKS:
        why = (
            "the workers are threads of the training process: no process of their own to load it apart from"
            if threads
            else f"the probe loads at most {MAX_CHECKS} failing indices again per process"
        )
        _emit(**head, index=None, outcome=SAMPLE_CHECK_UNVERIFIED, reason=why)
        return
    refused = quiet_fork.blocker()
    if refused is not None:
        _emit(**head, index=None, outcome=SAMPLE_CHECK_UNVERIFIED, reason=refused)
        return
    try:
        with quiet_signals.held_back():  # our child's exit, or a worker's, must not raise from the probe's frames
            _check(loader_id, epoch, iterator, *caught)
    except Exception as probe_exc:  # the training's own exception goes on unchanged
        probe_errors.record("sample_check", probe_exc, f"the sample loader {loader_id} failed on is not re-checked")


def _emit(**fields: Any) -> None:
    log = get_log()
    if log is not None:
        # a worker's error as the check got it: its credentials never reach the run directory (the event log
        # redacts these fields too; here they are named)
        for key in ("error_alone", "control_error", "reason"):
            if isinstance(fields.get(key), str):
                fields[key] = redact_text(fields[key])
        log.emit(EV_SAMPLE_CHECK, **fields)


def _check(loader_id: int, epoch: int, iterator: Any, exc_type: str, worker_id: int) -> None:
    head: dict[str, Any] = {"loader": loader_id, "epoch": epoch, "worker_id": worker_id, "exception": exc_type}
    workers = list(getattr(iterator, "_workers", None) or [])
    dataset = getattr(iterator, "_dataset", None)
    run_dir = os.environ[RUN_DIR_ENV]
    if not 0 <= worker_id < len(workers) or dataset is None:
        _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason="the failing worker is not known to the loop")
        return
    slot = read_slot(slot_path(run_dir, workers[worker_id].pid)) or {}
    held = slot.get("failed") or (slot if slot.get("phase") in _BUSY else {})
    index = held.get("index")
    head["index"] = index
    if getattr(iterator, "_dataset_kind", 0) != 0:  # _DatasetKind.Iterable: no index, the worker's stream instead
        _check_stream(head, iterator, dataset, workers, run_dir, held)
        return
    if held.get("phase") == "collate":
        _check_batch(head, dataset, [i for i in held.get("indices") or [] if isinstance(i, int)], run_dir, workers)
        return
    if index is None:
        _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason="no index recorded")
        return
    if (loader_id, index) in _checked:
        return
    _checked.add((loader_id, index))
    try:
        length: int | None = len(dataset)
    except Exception:
        length = None
    head["length"] = length
    if length is not None and not 0 <= index < length:  # the sampler's index: loading it proves nothing more
        _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason="the index is outside range(len(dataset))")
        return
    # The control: an index this worker loaded fine, the one before it in the batch, else the first of a batch it
    # finished (its slot's ring of recent batches); index 0 or 1 only when it loaded none.
    pos = held.get("pos") or 0
    known_good = [i for i in (held.get("indices") or [])[:pos] if isinstance(i, int)][::-1]
    known_good += [row[4] for row in reversed(slot.get("recent") or []) if isinstance(row[4], int) and row[4] >= 0]
    known_good += [i for i in (0, 1) if (length or 0) > i]
    control = next((i for i in known_good if i != index and (length is None or 0 <= i < length)), None)
    head["control_index"] = control
    _in_background(head, run_dir, workers, functools.partial(_load_pair, dataset, index, control), _same_failure)


def _same_failure(head: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """A load that fails otherwise than the worker did (another exception, a signal) says nothing of the sample."""
    if result.get("outcome") == SAMPLE_CHECK_FAILS and result.get("error_type_alone") != head["exception"]:
        why = f"loading it alone failed with {result.get('error_alone')}, not the worker's {head['exception']}"
        return {**result, "outcome": SAMPLE_CHECK_UNVERIFIED, "reason": why}
    return result


def _check_batch(head: dict[str, Any], dataset: Any, indices: list[int], run_dir: str, workers: list[Any]) -> None:
    """collate failed on a batch: its samples, loaded again one by one in the sandbox, compared by structure."""
    head["index"] = None  # the batch is at fault, not the last index fetched
    head["batch_indices"] = indices
    key = (head["loader"], -1000 - head["worker_id"])  # one comparison per worker's failing batch
    if len(indices) < 2 or key in _checked:
        if len(indices) < 2:
            _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason="the error came from collate on a one-sample batch")
        return
    _checked.add(key)
    _in_background(head, run_dir, workers, functools.partial(_load_batch, dataset, indices))


def _check_stream(
    head: dict[str, Any], iterator: Any, dataset: Any, workers: list[Any], run_dir: str, held: dict[str, Any]
) -> None:
    """An IterableDataset's record has no index: replay the failing worker's own stream alone, as torch started it
    (its worker info, seeds and worker_init_fn), through the records it loaded to the position it failed at."""
    position = head.get("index")
    head["kind"] = "iterable"
    if held.get("phase") == "collate" or not isinstance(position, int):
        why = "the error came from collate, not one record" if held.get("phase") == "collate" else "no position"
        _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason=why)
        return
    key = (head["loader"], -1 - head["worker_id"])  # one replay per worker's stream
    if key in _checked:
        return
    _checked.add(key)
    init_fn = _users_init_fn(getattr(iterator, "_worker_init_fn", None))
    stream = _Stream(dataset, head["worker_id"], len(workers), getattr(iterator, "_base_seed", None), init_fn)
    _in_background(head, run_dir, workers, functools.partial(_load_pair, stream, position, None), _same_replay)


def _same_replay(head: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """A replay that fails otherwise than the worker did (a signal, another exception) says nothing of the record."""
    if result.get("outcome") == SAMPLE_CHECK_FAILS and result.get("error_type_alone") != head["exception"]:
        why = f"the replay failed with {result.get('error_alone')}, not the worker's {head['exception']}"
        return {"outcome": SAMPLE_CHECK_UNVERIFIED, "reason": why, "seconds": result.get("seconds")}
    return result


def _users_init_fn(init_fn: Any) -> Any:
    """The loader's worker_init_fn without dlprobe's recording wrapper, also inside torch's partial for DataPipes."""
    if isinstance(init_fn, functools.partial):
        args = tuple(_users_init_fn(a) if hasattr(a, "user_fn") else a for a in init_fn.args)
        return functools.partial(init_fn.func, *args, **init_fn.keywords)
    return getattr(init_fn, "user_fn", init_fn)


class _Stream:
    """Indexable like a map-style dataset for the child: stream[p] replays this worker's stream to position p."""

    def __init__(self, dataset: Any, worker_id: int, num_workers: int, base_seed: int | None, init_fn: Any) -> None:
        self.dataset, self.worker_id, self.num_workers = dataset, worker_id, num_workers
        self.base_seed, self.init_fn = base_seed, init_fn

    def __getitem__(self, position: int) -> Any:
        import torch
        import torch.utils.data._utils.worker as torch_worker  # the training imported torch: already loaded

        seed = 0
        if isinstance(self.base_seed, int):  # the seeds torch's worker loop set (_worker_loop), for shuffle buffers
            import random

            seed = self.base_seed + self.worker_id
            random.seed(seed)
            torch.manual_seed(seed)
            numpy = sys.modules.get("numpy")
            if numpy is not None:
                generate_state = cast(Callable[[int, int], list[int]], torch_worker._generate_state)
                numpy.random.seed(generate_state(self.base_seed, self.worker_id))
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=self.worker_id, num_workers=self.num_workers, seed=seed, dataset=self.dataset
        )
        try:
            if self.init_fn is not None:
                self.init_fn(self.worker_id)
            records = iter(self.dataset)
        except Exception as exc:
            raise _ReplayNotStarted(exc) from exc
        for before in range(position):
            try:
                next(records)
            except StopIteration:
                raise _StreamEnded(before) from None
            except Exception as exc:
                raise _EarlierRecord(before, exc) from exc
        try:
            return next(records)
        except StopIteration:
            raise _StreamEnded(position) from None


class _ReplayNotStarted(Exception):
    """worker_init_fn or iter(dataset) failed in the replay (CUDA in a forked child, say): the record is not checked."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"the replay could not start: {_describe(exc)}")


class _StreamEnded(Exception):
    """The replayed stream ended before the position the worker failed at: not the worker's stream, alone."""

    def __init__(self, at: int) -> None:
        super().__init__(f"the replayed stream ended after {at} records")
        self.at = at


class _EarlierRecord(Exception):
    """A record before the position failed in the replay: every record fails alone, not one."""

    def __init__(self, at: int, exc: BaseException) -> None:
        super().__init__(f"record {at} failed first: {_describe(exc)}")
        self.at, self.error = at, exc


def _wait_idle(run_dir: str, workers: list[Any]) -> list[int]:
    """Wait (bounded) until the workers are quiet; the ids of those still busy.

    A worker's slot keeps the phase of a fetch that raised until its next one begins, so the phase cannot tell a
    worker loading from one waiting for work after its error: quiet is a slot (its sequence number, its fetch count)
    and a CPU time that both stay unchanged over QUIET_S."""
    deadline = time.monotonic() + IDLE_WAIT_S
    before = _activity(run_dir, workers)
    while True:
        time.sleep(QUIET_S)
        now = _activity(run_dir, workers)
        busy = sorted(w for w in now if before.get(w) != now[w])
        if not busy or time.monotonic() > deadline:
            return busy
        before = now


def _activity(run_dir: str, workers: list[Any]) -> dict[int, tuple[Any, ...]]:
    """What changes while a worker works: its slot's sequence number and fetch count, and its CPU time."""
    out: dict[int, tuple[Any, ...]] = {}
    for worker_id, worker in enumerate(workers):
        pid = worker.pid
        if pid is None:  # never is_alive(): it reaps a dead worker, and torch's SIGCHLD check would then miss it
            continue
        slot = read_slot(slot_path(run_dir, pid)) or {}
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[-1].split()
            cpu = int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
        except (OSError, IndexError, ValueError):
            cpu = -1
        out[worker_id] = (slot.get("seq"), slot.get("fetches"), cpu)
    return out


def _describe(exc: BaseException) -> str:
    # redacted before it is cut: a password cut in two would leave its first half
    return redact_text(f"{type(exc).__name__}: {exc}".splitlines()[0])[:300] if str(exc) else type(exc).__name__


def _child(out: int, body: Callable[[dict[str, Any]], None]) -> None:
    """In the forked child: silent, bounded, sandboxed, and never back into the parent's code (os._exit). `body`
    loads what the check needs and fills the result, which goes back on `out` as JSON."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        # The script's own streams may not be fds 1 and 2 (a tee, a logger's file, a notebook's): replaced too, and
        # its log records dropped, so the load leaves no line anywhere the training writes.
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the child ends in os._exit
        faulthandler.disable()  # a crash here is reported by its signal, not by a dump on the training's stderr
        logging = sys.modules.get("logging")
        if logging is not None:
            logging.disable(logging.CRITICAL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(LOAD_LIMIT_S) + 2)  # a backstop: the parent kills the child at LOAD_LIMIT_S anyway
        quiet_fork.name_as_check()
        result: dict[str, Any] = {}
        try:
            result["isolation"] = sandbox.enter(keep={out})
        except sandbox.Unavailable as refused:
            result["outcome"] = SAMPLE_CHECK_UNVERIFIED
            result["reason"] = f"no sandbox to load it in ({refused}), so dlprobe did not run the dataset's code again"
        else:
            body(result)
        os.write(out, json.dumps(result, default=str).encode()[:60000])
    finally:
        os._exit(0)


def _refused_text(exc: BaseException, by_sandbox: str) -> str:
    return (
        f"loading it alone in the sandbox failed with {_describe(exc)}, which the sandbox may have caused "
        f"({by_sandbox}): the dataset needs to write, reach the network or use a stream it shares"
    )


def _load_pair(dataset: Any, index: int, control: int | None, result: dict[str, Any]) -> None:
    """dataset[index] alone; where it fails, the control index too (a failure of both alike is not the sample)."""
    try:
        dataset[index]
        result["outcome"] = SAMPLE_CHECK_LOADS
    except (_StreamEnded, _ReplayNotStarted) as unchecked:
        result["outcome"], result["reason"] = SAMPLE_CHECK_UNVERIFIED, str(unchecked)
    except _EarlierRecord as earlier:
        by_sandbox = sandbox.refused_by_sandbox(earlier.error)
        if by_sandbox is not None:  # a stream from a server, say: the sandbox has no network
            result["outcome"] = SAMPLE_CHECK_UNVERIFIED
            result["reason"] = f"the replay failed at record {earlier.at} in the sandbox ({by_sandbox})"
            return
        result["outcome"], result["error_alone"] = SAMPLE_CHECK_FAILS_ANY, _describe(earlier.error)
        result["error_type_alone"] = type(earlier.error).__name__
        result["control_index"], result["control_loads"] = earlier.at, False
        result["control_error"] = _describe(earlier.error)
    except Exception as exc:
        result["error_alone"], result["error_type_alone"] = _describe(exc), type(exc).__name__
        by_sandbox = sandbox.refused_by_sandbox(exc)
        if by_sandbox is not None:  # a write refused, no network, a closed stream: not the sample's failure
            result["outcome"], result["reason"] = SAMPLE_CHECK_UNVERIFIED, _refused_text(exc, by_sandbox)
            return
        result["outcome"] = SAMPLE_CHECK_FAILS
        if control is not None:
            try:
                dataset[control]
                result["control_loads"] = True
            except Exception as control_exc:
                result["control_loads"] = False
                result["control_error"] = _describe(control_exc)
                if sandbox.refused_by_sandbox(control_exc) is not None:
                    result["control_loads"] = None  # the sandbox's doing, maybe: the control tells nothing
                elif type(control_exc).__name__ == result["error_type_alone"]:
                    result["outcome"] = SAMPLE_CHECK_FAILS_ANY


def _load_batch(dataset: Any, indices: list[int], result: dict[str, Any]) -> None:
    """Each sample of a batch that did not collate, loaded one by one and described by its structure (types,
    shapes, dtypes): the ones unlike the rest are named (in_training/batch_compare.py)."""
    shapes: dict[int, str] = {}
    for index in indices[: batch_compare.MAX_SAMPLES]:
        try:
            shapes[index] = batch_compare.signature(dataset[index])
        except Exception as exc:
            by_sandbox = sandbox.refused_by_sandbox(exc)
            result["outcome"] = SAMPLE_CHECK_UNVERIFIED
            result["reason"] = (
                _refused_text(exc, by_sandbox) if by_sandbox else f"dataset[{index}] failed alone: {_describe(exc)}"
            )
            return
    result.update(batch_compare.odd_ones(shapes))


def _load_in_child(dataset: Any, index: int, control: int | None) -> dict[str, Any]:
    """dataset[index] (and the control) loaded in the sandboxed child, waited for (bounded): the checker's own step,
    driven directly by the unit tests (the run's path, with its headroom and SIGCHLD guards, is _in_background)."""
    return _fork_and_wait(functools.partial(_load_pair, dataset, index, control))


def _in_background(
    head: dict[str, Any],
    run_dir: str,
    workers: list[Any],
    body: Callable[[dict[str, Any]], None],
    finish: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """Start the check and return at once: the training's own exception goes on now, not after the check. The
    checker (in_training/detached.py) waits for the workers to go quiet, loads in its sandboxed child, and writes
    the event itself with the training's pid."""
    low = quiet_fork.headroom_blocker(0)  # loading a few samples takes little: the margin is what it needs
    if low is not None:
        _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason=low)
        return
    owner = os.getpid()
    detached.start(functools.partial(_checker, owner, head, run_dir, workers, body, finish), IDLE_WAIT_S + LOAD_LIMIT_S)


def _checker(
    owner: int,
    head: dict[str, Any],
    run_dir: str,
    workers: list[Any],
    body: Callable[[dict[str, Any]], None],
    finish: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None,
) -> None:
    """The background check, in its detached process: its outcome is an event, whatever happens."""
    try:
        busy = _wait_idle(run_dir, workers)
        if busy:
            why = f"workers {busy} were still loading after {IDLE_WAIT_S:.0f} s: a load now would not be alone"
            result: dict[str, Any] = {"outcome": SAMPLE_CHECK_UNVERIFIED, "reason": why}
        else:
            result = _fork_and_wait(body)
        if finish is not None:
            result = finish(head, result)
        _emit(**head, **result, pid=owner)
    except BaseException as exc:  # recorded as the check's outcome: nothing else of the checker is seen
        with contextlib.suppress(Exception):
            _emit(**head, outcome=SAMPLE_CHECK_UNVERIFIED, reason=f"the check failed: {_describe(exc)}", pid=owner)


def _fork_and_wait(body: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    read_end, write_end = os.pipe()
    start = time.monotonic()
    with warnings.catch_warnings():  # 3.12+ warns on fork() with threads: not on their stderr
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in os._exit
        os.close(read_end)
        _child(write_end, body)
    os.close(write_end)
    data = b""
    try:
        deadline = start + LOAD_LIMIT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_end)
    status = _reap(pid, time.monotonic() >= start + LOAD_LIMIT_S and not data)
    seconds = round(time.monotonic() - start, 3)
    if data:
        try:
            return {**json.loads(data), "seconds": seconds}
        except ValueError:  # cut short: the child died while writing it
            data = b""
    if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
        name = signal.Signals(os.WTERMSIG(status)).name
        return {"outcome": SAMPLE_CHECK_FAILS, "error_alone": f"the process loading it alone died of {name}",
                "error_type_alone": name, "seconds": seconds}  # fmt: skip
    return {"outcome": SAMPLE_CHECK_UNVERIFIED, "seconds": seconds,
            "reason": f"loading it alone did not finish within {LOAD_LIMIT_S:.0f} s"}  # fmt: skip


def _reap(pid: int, kill: bool) -> int | None:
    """The child's wait status; a child still running past the limit is killed (SIGKILL: it cannot refuse)."""
    for attempt in range(2):
        if kill or attempt:
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if done:
                return status
            time.sleep(0.01)
    return None
