"""Why a DataLoader worker died, as the dying rank can tell it before it exits: torch's message (pid, signal or
exit code), the worker's own in-flight slot (its loader, worker id and the index it held), the kernel's OOM-kill
line for that pid and the rise of the memory cgroup's OOM-kill count since the loaders were patched.

The rank's supervisor analyses the whole run only after the job; torchrun's agent reads the rank's error file as
soon as the rank exits, so this is the verdict the rank can give on its own: the `worker-killed` finding's cause in
the same vocabulary (oom only where the kernel's log or the cgroup's count shows the kill; a SIGKILL without either
is said as unexplained, never guessed)."""

from __future__ import annotations

import multiprocessing.process
import os
import signal as signals
from dataclasses import dataclass, field
from typing import Any

from dlprobe.rundir import inflight_format
from dlprobe.rundir.schema import RUN_DIR_ENV
from dlprobe.system import cgroup, kernlog
from dlprobe.torch_text import TORCH_SIGNALS, WORKER_EXIT_CODE, WORKER_KILLED, WORKERS_EXITED

_oom_kills_at_start: int | None = None  # the memory cgroup's OOM-kill count when the loaders were patched
_boot_clock_at_start = 0.0  # the kernel log's clock then: an older kill line names a pid since reused


def remember_baseline() -> None:
    """The cgroup's OOM-kill count and the kernel log's clock now, so a later kill is told from earlier ones."""
    global _oom_kills_at_start, _boot_clock_at_start
    _boot_clock_at_start = kernlog.since_boot()
    state = cgroup.memory_state(cgroup.memory_dir())
    _oom_kills_at_start = state.get("oom_kill") if state else None


@dataclass
class WorkerDeath:
    """One dead worker, as torch named it and the rank's own evidence explains it."""

    pid: int
    signal: str | None  # SIGKILL, SIGSEGV, ...; None for an exit code or an unexplained exit
    exit_code: int | None
    cause: str  # worker-killed's vocabulary: oom, bus, segfault, abort, fpe, sigill, signal, exit, unknown
    loader_id: int | None = None
    worker_id: int | None = None
    index: Any = None
    seen: dict[str, Any] = field(default_factory=dict)  # the evidence for the cause: kernel_log, cgroup_oom_kills
    torch_message: str = ""

    def verdict(self) -> str:
        """One line: which worker, of which loader, died how, on which index."""
        worker = f"DataLoader worker {self.worker_id}" if self.worker_id is not None else "A DataLoader worker"
        loader = f" of loader {self.loader_id}" if self.loader_id is not None else ""
        on = f" while loading index {self.index}" if self.index is not None else ""
        return f"{worker} (pid {self.pid}){loader} {_how(self)}{on}"

    def evidence(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "worker_id": self.worker_id,
            "loader": self.loader_id,
            "signal": self.signal,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "index": self.index,
            **self.seen,
        }


def _how(death: WorkerDeath) -> str:
    if death.cause == "oom":
        limit = " at its memory cgroup's limit" if death.seen.get("cgroup") else ""
        return f"was killed by the kernel's OOM killer{limit} (SIGKILL)"
    if death.cause == "exit":
        return f"exited with code {death.exit_code} (os._exit or a C library's exit: no Python traceback)"
    if death.cause == "bus":
        return "died of SIGBUS (a write to /dev/shm that could not be backed, or a memory-mapped file cut short)"
    if death.cause in ("segfault", "abort", "fpe", "sigill"):
        return f"crashed in native code ({death.signal})"
    if death.signal == "SIGKILL":
        looked = "the kernel's log and the cgroup's OOM count name no OOM kill of it"
        if not death.seen.get("kernel_log_readable", True):
            looked = "no OOM kill in the cgroup's count, and the kernel's log is unreadable here"
        return f"was killed by SIGKILL from outside ({looked}: a scheduler, a watchdog, kill -9)"
    if death.signal:
        return f"was killed by {death.signal}"
    return "exited unexpectedly (nothing says how)"


def _slot(pid: int) -> dict[str, Any]:
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return {}
    return inflight_format.read_slot(inflight_format.slot_path(run_dir, pid)) or {}


def _held_index(slot: dict[str, Any]) -> Any:
    """The index the worker was loading as it died: its fetch in progress, else its first failed one."""
    if slot.get("phase") in ("getitem", "worker_init_fn"):
        return slot.get("index")
    failed = slot.get("failed") or {}
    return failed.get("index")


def _oom_seen(pid: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    found = kernlog.oom_kills({pid}, _boot_clock_at_start - 1.0)
    seen["kernel_log_readable"] = found["readable"]
    if found["kills"]:
        kill = found["kills"][0]
        seen["kernel_log"] = kill["line"]
        seen["cgroup"] = kill["cgroup"]
    state = cgroup.memory_state(cgroup.memory_dir())
    now = state.get("oom_kill") if state else None
    if now is not None and _oom_kills_at_start is not None and now > _oom_kills_at_start:
        seen["cgroup_oom_kills"] = now - _oom_kills_at_start
        seen["cgroup"] = True
    return seen


def explain(pid: int, torch_signal: str | None, exit_code: int | None, torch_message: str) -> WorkerDeath:
    """The death of worker `pid` with what torch said of it (its signal's text, or its exit code, or neither)."""
    slot = _slot(pid)
    seen: dict[str, Any] = {}
    if exit_code is not None:
        signal, cause = None, "exit"
    elif torch_signal is None:
        signal, cause = None, "unknown"
    else:
        signal, cause = TORCH_SIGNALS.get(torch_signal, (torch_signal, "signal"))
        seen = _oom_seen(pid) if cause == "oom" else {}
        if cause == "oom" and not (seen.get("kernel_log") or seen.get("cgroup_oom_kills")):
            cause = "unknown"  # SIGKILL alone is no OOM kill: the evidence must show the killer
    return WorkerDeath(
        pid,
        signal,
        exit_code,
        cause,
        loader_id=slot.get("loader_id"),
        worker_id=slot.get("worker_id"),
        index=_held_index(slot),
        seen=seen,
        torch_message=torch_message,
    )


def from_exception(exc: BaseException) -> WorkerDeath | None:
    """The worker death an exception reports, or one in its chain (torch raises "exited unexpectedly" from the
    SIGCHLD handler's "is killed by signal", a wrapper its own error from torch's): the text that says how wins."""
    texts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(texts) < 20:  # a chain that loops back on itself ends here
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    for text in texts:
        killed = WORKER_KILLED.search(text)
        if killed:
            return explain(int(killed["pid"]), killed["signal"].strip(), None, killed.group(0))
    for text in texts:
        exited = WORKER_EXIT_CODE.search(text)
        if exited:
            return explain(int(exited["pid"]), None, int(exited["exit_code"]), exited.group(0))
    for text in texts:
        gone = WORKERS_EXITED.search(text)
        if gone:
            pid = int(gone["pids"].split(",")[0])
            status = reaped_status(exc, pid)
            if status is not None and status < 0:
                return explain(pid, _torch_text_of(-status), None, gone.group(0))
            return explain(pid, None, status or None, gone.group(0))
    return None


def reaped_status(exc: BaseException, pid: int) -> int | None:
    """The exit status of worker `pid` as its multiprocessing Process holds it (negative: the signal that killed
    it), found in the locals of torch's frames on the exception's traceback.

    Torch says "is killed by signal" only when its SIGCHLD handler sees the death first; when the loader's own
    liveness check reaps the worker first, torch says just "exited unexpectedly" (a clean-clone CI run of the torchrun
    test, and a busy rerun of it), and the signal is then only in the Process object that reaped it: `failed_workers` in
    `_try_get_data`, or the iterator's `_workers`."""
    current: BaseException | None = exc
    for _ in range(20):  # a chain that loops back on itself ends here
        if current is None:
            return None
        tb = current.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if "torch" in frame.f_code.co_filename:
                for process in _processes_in(frame.f_locals):
                    if process.pid == pid:
                        return process.exitcode
            tb = tb.tb_next
        current = current.__cause__ or current.__context__
    return None


def _processes_in(scope: dict[str, Any]) -> list[multiprocessing.process.BaseProcess]:
    candidates = list(scope.get("failed_workers") or [])
    candidates += list(getattr(scope.get("self"), "_workers", None) or [])
    return [p for p in candidates if isinstance(p, multiprocessing.process.BaseProcess)]


def _torch_text_of(signum: int) -> str:
    """The signal as torch's message would name it ("Killed"), so one table gives its cause; else its own name."""
    try:
        name = signals.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return next((text for text, (sig, _cause) in TORCH_SIGNALS.items() if sig == name), name)
