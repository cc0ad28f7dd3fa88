"""What the training process looks like at the moments that matter: threads at fork, CUDA and pinning in use."""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
from collections import Counter
from typing import Any

from dlprobe.in_training import probe_errors

OWN_THREAD_PREFIX = "dlprobe-"  # the probe's own threads (start-up sampler, tune's watchdog) are not the user's

_baseline: dict[str, int] | None = None


def _os_threads() -> list[str]:
    """The kernel's name (comm) of every thread of this process."""
    names = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # noqa: S112 - the thread ended between listdir and open: it is not there at fork either
            continue
    return names


# multiprocessing's queue feeder threads only write to their own queue's pipe, which no forked worker of another
# loader ever uses; a feeder of the previous epoch's queues is often still shutting down at the next fork.
BENIGN_THREADS = ("QueueFeederThread",)
# Progress bars' refresh threads (rich.live's, which Lightning's RichProgressBar runs; tqdm's monitor) wake a few
# times a second and then hold only the bar's own lock, which workers never take: caught mid-refresh at fork they
# would read as a running thread by chance alone.
# Subclasses count too: Lightning's RichProgressBar runs its own, which refreshes under the bar's lock.
BENIGN_THREAD_CLASSES = ("rich.live._RefreshThread", "tqdm._monitor.TMonitor")


def _benign_class(thread: threading.Thread) -> bool:
    return any(f"{cls.__module__}.{cls.__qualname__}" in BENIGN_THREAD_CLASSES for cls in type(thread).__mro__)


def _alive(thread: threading.Thread) -> bool:
    """The OS thread still exists (a Thread object outlives its thread for a moment while it is being joined)."""
    native = getattr(thread, "native_id", None)
    return native is None or os.path.exists(f"/proc/self/task/{native}")


# A thread whose innermost Python frame is one of these is parked in a wait that holds no lock of its own
# (Condition.wait releases its lock): tqdm's monitor, executors' idle workers, queue consumers.
_WAITS = re.compile(r"(^|/)(threading|queue|selectors|concurrent/futures/thread)\.py$")
_SLEEP = re.compile(r"\bsleep\(")


def _is_lock(value: Any) -> bool:
    return type(value).__name__ in ("lock", "RLock", "_RLock", "Lock") and hasattr(value, "acquire")


def _uses_lock(frame: Any) -> bool:
    """A lock named in the code of the thread's own frames (not the wait machinery's): it takes that lock."""
    while frame is not None:
        code = frame.f_code
        if not _WAITS.search(code.co_filename):
            names = set(code.co_names) | set(code.co_varnames)
            values = [frame.f_locals.get(n, frame.f_globals.get(n)) for n in names]
            if any(_is_lock(v) for v in values):
                return True
        frame = frame.f_back
    return False


def _thread_state(frame: Any) -> dict[str, Any]:
    """Whether the thread was idle (in a wait or a sleep, taking no lock of its own) or running at this instant."""
    if frame is None:
        return {"state": "unknown"}
    code = frame.f_code
    where = f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"
    if _uses_lock(frame):
        return {"state": "uses-lock", "frame": where}
    waiting = _WAITS.search(code.co_filename) or _SLEEP.search(linecache.getline(code.co_filename, frame.f_lineno))
    return {"state": "waiting" if waiting else "running", "frame": where}


def _left_out(thread: threading.Thread) -> bool:
    """The probe's own threads and the benign ones: not the user's risk."""
    return thread.name.startswith(OWN_THREAD_PREFIX) or thread.name in BENIGN_THREADS or _benign_class(thread)


def _python_threads() -> list[dict[str, Any]]:
    main = threading.main_thread()
    frames = sys._current_frames()  # this frame among them: a cycle, cleared below
    try:
        return [
            {"name": t.name, "daemon": t.daemon, **_thread_state(frames.get(t.ident or -1))}
            for t in threading.enumerate()
            if t is not main and not _left_out(t) and _alive(t)
        ]
    finally:
        # Left in place, the cycle keeps every caller's frame alive until a garbage collection: the DataLoader
        # iterator being made in __iter__ among them, whose workers then outlive a loop that breaks out of its epoch.
        frames.clear()


def _counted_os_threads() -> int:
    """The process's OS threads less the Python threads left out: a left-out thread still alive (last epoch's queue
    feeder shutting down, the start-up sampler being joined, both slower on a busy machine) would otherwise read as
    a native thread started since import."""
    left_out = sum(1 for t in threading.enumerate() if t is not threading.main_thread() and _left_out(t) and _alive(t))
    return len(_os_threads()) - left_out


def record_baseline() -> None:
    """Threads right after torch's DataLoader module is imported: numpy's BLAS pool is there already and harmless."""
    global _baseline
    if _baseline is None:
        _baseline = {"os_threads": _counted_os_threads(), "python_threads": len(_python_threads())}


def fork_snapshot() -> dict[str, Any]:
    """Threads alive, OpenMP and CUDA state just before a DataLoader forks its workers."""
    os_names = _os_threads()
    python_threads = _python_threads()
    torch = sys.modules.get("torch")
    state: dict[str, Any] = {
        "os_threads": _counted_os_threads(),
        "os_thread_names": dict(Counter(os_names)),
        "python_threads": python_threads,
        "baseline": _baseline,
    }
    if torch is not None:
        try:
            state["torch_threads"] = int(torch.get_num_threads())
            state["openmp"] = bool(torch.backends.openmp.is_available())
            # is_initialized() never initialises CUDA itself, unlike is_available(), so the probe cannot poison fork.
            state["cuda_initialized"] = bool(torch.cuda.is_initialized())
        except Exception as exc:  # fork-hazard must not reason from a state it did not get: say it is missing
            probe_errors.record(
                "runtime_state.fork_snapshot", exc, "torch's thread, OpenMP and CUDA state at fork is missing"
            )
    return state


def accel_state(iterator: Any) -> dict[str, Any]:
    """Whether the script uses CUDA by its second batch, and whether the iterator really pins memory."""
    torch = sys.modules.get("torch")
    state: dict[str, Any] = {"pin_effective": getattr(iterator, "_pin_memory", None)}
    if torch is not None:
        try:
            state["cuda_initialized"] = bool(torch.cuda.is_initialized())
        except Exception:
            state["cuda_initialized"] = None
    return state
