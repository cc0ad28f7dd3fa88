"""When dlprobe may fork a copy of the training process for a check of its own, and how the script is kept from
seeing it.

Two checks fork the training process: the start-method readiness copy (in_training/isolated.py) and the sample
check (in_training/sample_check.py). A fork is not invisible by itself:

- `os.fork()` runs every handler registered with `os.register_at_fork`: the script's may print or count, and a
  library's `before` or `after_in_parent` handler runs in the training itself (JAX warns on every fork). Python offers
  no way to list them, so the hooks record who registers one (`track_at_fork`, installed before the script's first
  line), and no copy is forked while the script's own code has registered any, or a library one that runs in the
  parent. A library's `after_in_child` handler (huggingface_hub, fsspec: they reset a session or an event loop in
  the child) runs only in the copy, where nothing of it reaches the training;
- the copy's exit sends SIGCHLD to the training: a Python handler of the script's (or torch's, which chains the
  script's behind it) would run once more. While dlprobe's own child lives, the handler is swapped for one that only
  notes the signal; afterwards the note is passed on only when another child of the training has ended too (its
  zombie is still waiting: `waitid(WNOWAIT)` sees it without reaping it);
- the copy's pages are the training's until either writes them: pickling touches every object's reference count, so
  a copy can come to hold as much private memory as the training's anonymous memory. Near a memory limit (the
  cgroup's, or the host's available memory) that is what gets the job killed, so no copy is forked without that
  headroom.
Where a fork would be seen or could hurt, the check is not run and says why (`blocker`, `headroom_blocker`).
`--no-isolated-checks` (DLPROBE_NO_ISOLATED_CHECKS) turns both checks off.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dlprobe.rundir.schema import CHECK_PROCESS_NAME, NO_ISOLATED_CHECKS_ENV
from dlprobe.system import cgroup
from dlprobe.system.procmem import system_memory

HEADROOM_MARGIN = 128 * 1024 * 1024  # left free beyond what the copy could take: the training goes on allocating
_MIB = 1024 * 1024

# Where handlers registered by the standard library and by dlprobe itself come from: those only reset locks and
# seeds in the child (random, logging, concurrent.futures) or forget dlprobe's own state there.
_STDLIB = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")
_DLPROBE = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "")

# Libraries whose at-fork handlers, parent-side ones included, keep silent state of their own: torch ("bad fork" flags
# for CUDA and its thread pools), filelock (which descriptors it owns across the fork; imported by HF datasets, hub)
_HARMLESS_AT_FORK = ("torch", "filelock")
_foreign_at_fork: list[str] = []  # "file:line" of each handler registered from outside
_tracking = False


def foreign_code(path: str) -> bool:
    """Code from outside the standard library and dlprobe: the script's, or an installed library's."""
    if path.startswith("<frozen"):
        return False  # the standard library's own frozen modules
    real = os.path.realpath(path)
    in_stdlib = real.startswith(_STDLIB) and "-packages" + os.sep not in real[len(_STDLIB) :]
    return not (in_stdlib or real.startswith(_DLPROBE))


def track_at_fork() -> None:
    """Record where a handler is registered with os.register_at_fork from outside the standard library and dlprobe.

    The wrapper calls the original with the same arguments; it stays in os for the process's life (undoing it would
    drop registrations made through it from the record)."""
    global _tracking
    if _tracking or not hasattr(os, "register_at_fork"):
        return
    original = os.register_at_fork

    def register_at_fork(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)  # first: a wrong call raises as it would unprobed, before anything is noted
        caller = sys._getframe(1)
        path = caller.f_code.co_filename
        package = str(caller.f_globals.get("__name__", "")).split(".")[0]
        if package in _HARMLESS_AT_FORK or not foreign_code(path):
            return
        in_parent = kwargs.get("before") is not None or kwargs.get("after_in_parent") is not None
        if in_parent or not _installed_library(path):  # a library's child-only handler stays in the copy
            _foreign_at_fork.append(f"{os.path.basename(path)}:{caller.f_lineno}")

    register_at_fork.__doc__ = original.__doc__
    register_at_fork.__wrapped__ = original  # type: ignore[attr-defined]
    os.register_at_fork = register_at_fork
    _tracking = True


def _installed_library(path: str) -> bool:
    parts = os.path.realpath(path).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def name_as_check() -> None:
    """In a copy dlprobe forked: `dlprobe-check` in /proc/PID/comm (ps, top, the report's process table, and the
    supervisor finding a checker still at work), not a second copy of the training."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(CHECK_PROCESS_NAME)


def turned_off() -> bool:
    return bool(os.environ.get(NO_ISOLATED_CHECKS_ENV))


def blocker() -> str | None:
    """Why no copy of the training may be forked now, or None."""
    if turned_off():
        return "dlprobe's isolated checks are turned off (--no-isolated-checks)"
    if _foreign_at_fork:
        where = ", ".join(sorted(set(_foreign_at_fork))[:3])
        return f"at-fork handlers ({where}) would run in a copy forked by dlprobe"
    if _script_handles_sigchld() and threading.current_thread() is not threading.main_thread():
        # Python runs signal handlers in the main thread only, and only it may swap them: the copy's exit would reach
        # the script's handler
        return "the script handles SIGCHLD and the loader runs outside the main thread: its handler would see the copy"
    return None


def _script_handles_sigchld() -> bool:
    try:
        return callable(signal.getsignal(signal.SIGCHLD))
    except (AttributeError, ValueError):  # no SIGCHLD on this platform
        return False


def anon_resident_bytes() -> int | None:
    """This process's anonymous resident memory (RssAnon): the most a forked copy can come to hold privately."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def headroom_blocker(need: int | None) -> str | None:
    """Why a copy that could take `need` bytes must not be forked here (a memory limit is too close), or None.

    The copy is charged to the training's cgroup: the tightest limit on the way to the root, less its usage, is what
    both share; and the host's MemAvailable, for a job without a limit."""
    if need is None:
        return "this process's memory could not be read, so the copy's cost is not known"
    want = need + HEADROOM_MARGIN
    try:
        state = cgroup.memory_state(cgroup.memory_dir())
    except Exception:  # an unreadable cgroup hierarchy: the host's figure still guards
        state = None
    if state and state.get("limit") and state.get("usage") is not None:
        left = int(state["limit"]) - int(state["usage"])
        if left < want:
            return (
                f"the copy could take up to {need / _MIB:.0f} MiB and the job's memory limit leaves "
                f"{max(0, left) / _MIB:.0f} MiB (limit {int(state['limit']) / _MIB:.0f} MiB): a fork could get the "
                "training killed"
            )
    available = system_memory().get("available") or 0
    if available and available < want:
        return (
            f"the copy could take up to {need / _MIB:.0f} MiB and the machine has {available / _MIB:.0f} MiB "
            "available: a fork could get the training killed"
        )
    return None


@contextlib.contextmanager
def sigchld_kept_from_script() -> Iterator[None]:
    """While dlprobe's own child lives and is reaped, SIGCHLD only notes; the note goes on to the handler that was
    there only when another child of the training has ended meanwhile (then its signal may be in the note)."""
    try:
        previous = signal.getsignal(signal.SIGCHLD)
    except (AttributeError, ValueError):
        yield
        return
    if not callable(previous):  # SIG_DFL / SIG_IGN: the signal does nothing the script can see
        yield
        return
    noted: list[tuple[int, Any]] = []

    def note(signum: int, frame: Any) -> None:
        noted.append((signum, frame))

    try:
        signal.signal(signal.SIGCHLD, note)
    except ValueError:  # not the main thread: blocker() refused the fork where a handler would see it
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, previous)
        if noted and _another_child_ended():
            _pass_on(previous, noted[0])


def _another_child_ended() -> bool:
    """A child of the training that ended and is not reaped yet (dlprobe's own is reaped by now)."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # no child at all
        return False
    except OSError:
        return True  # unknown: passing a signal on is what the unprobed training could have seen


def _pass_on(handler: Callable[..., Any], noted: tuple[int, Any]) -> None:
    handler(*noted)  # what it raises (torch's "worker killed") is the training's own, as it would be unprobed
