"""Why a stuck process is stuck, read from its stack and kernel state: fork-inherited locks, OpenMP/OpenCV
thread pools after fork, blocked reads, busy loops, queue waits. Pure functions over a hang record's entries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlprobe.system.pyspy import STOPPED_STATES, stopped_note

_OPENMP = re.compile(r"libgomp|\bgomp_|GOMP_|__kmp|libiomp|mkl_.*omp|omp_", re.IGNORECASE)
_OPENCV = re.compile(r"libopencv|cv2|cv::", re.IGNORECASE)
_LOCK_NATIVE = re.compile(
    r"__lll_lock_wait|pthread_mutex_(?:timed)?lock|PyThread_acquire_lock|lock_PyThread_acquire_lock|"
    r"PyMUTEX_LOCK|sem_(?:clock|timed)?wait|do_futex_wait|futex_abstimed_wait|pthread_cond_(?:timed)?wait",
)
_LOCK_LINE = re.compile(r"\bwith\b[^:]*lock|\.acquire\(|lock\.__enter__", re.IGNORECASE)
_READ_WCHANS = re.compile(
    r"pipe|wait_for_partner|sk_wait|sock|tcp|unix_stream|inet_|nfs|rpc_|fuse|io_schedule|folio_wait|wait_on_page|"
    r"blk|ext4|xfs|do_select|n_tty",
    re.IGNORECASE,
)
_READ_SYSCALLS = {"read", "pread64", "readv", "recvfrom", "recvmsg", "accept", "accept4", "connect", "open", "openat"}
_SLEEP_SYSCALLS = {"nanosleep", "clock_nanosleep"}
_QUEUE_FRAMES = re.compile(r"Queue\.get|_try_get_data|_get_data|Connection\._poll|Condition\.wait|select")
BUSY_CPU_SHARE = 0.5
# Shared objects every process runs through (the C library, the loader, the interpreter): a wait in them says nothing
# about whose code waits; the first other shared object in the stack is the library that does.
_SYSTEM_OBJECTS = re.compile(
    r"(^|/)(libc|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libm|libdl|librt|libpython[\d.]*|python[\d.]*)"
    r"(\.so|-|$)"
)
_MANGLED_PART = re.compile(r"(\d+)")
_RUST_NOISE = re.compile(r"Cs[0-9A-Za-z]*_|B[0-9A-Za-z]*_|(?<=M)s[0-9A-Za-z]*_")


@dataclass(frozen=True)
class NativeWait:
    """The library whose native code a thread waits in: its name, its shared object and the innermost function."""

    library: str
    shared_object: str
    function: str


def readable_symbol(name: str) -> str:
    """A Rust (v0 `_R...`) or C++ (`_ZN...E`) symbol's length-prefixed parts joined: rayon_core::latch::LockLatch::
    wait_and_reset. Not a full demangler: enough to read what waits. Other names come back as they are."""
    if not name.startswith(("_R", "_ZN")):
        return name
    if name.startswith("_R"):  # crate hashes (Cs...), back-references (B..._) and impl disambiguators (Ms..._)
        name = _RUST_NOISE.sub("", name)
    parts, i = [], 0
    while i < len(name):
        match = _MANGLED_PART.match(name, i)
        if match is None:
            i += 1
            continue
        length, start = int(match.group(1)), match.end()
        word = name[start : start + length]
        if length and len(word) == length and (word[0].isalpha() or word[0] == "_"):
            parts.append(word)
            i = start + length
        else:
            i = match.end()
    return "::".join(parts) if parts else name


def library_of(path: str) -> str:
    """The library a shared object belongs to: its package under site-packages (tokenizers/tokenizers.abi3.so ->
    tokenizers), else the file's own name without `lib` and versions (libgomp.so.1 -> gomp)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1].split("/", 1)[0].split(".", 1)[0]
    name = path.rsplit("/", 1)[-1].split(".so", 1)[0]
    return name[3:] if name.startswith("lib") else name


def native_wait(thread: dict[str, Any] | None) -> NativeWait | None:
    """The library whose native code the thread is in: the innermost native frame, before any Python frame, in a
    shared object that is not the C library or the interpreter. None where the stack has no such frame."""
    frames = _inner(thread, 16)
    for i, frame in enumerate(frames):
        if not frame.get("native"):
            return None
        path = frame.get("file") or ""
        if ".so" not in path or _SYSTEM_OBJECTS.search(path):
            continue
        same = [f for f in frames[i : i + 3] if f.get("native") and f.get("file") == path]  # its next frames too
        symbols = " <- ".join(readable_symbol(str(f.get("name") or "?")) for f in same)
        return NativeWait(library_of(path), path.rsplit("/", 1)[-1], symbols)
    return None


def possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


@dataclass
class Cause:
    cause: str
    summary: str
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)


def indices_text(indices: list[Any] | None, limit: int = 8) -> str:
    """A batch's indices for a sentence: the first few, and how many there are."""
    indices = indices or []
    shown = ", ".join(str(i) for i in indices[:limit])
    return f"[{shown}, ... ({len(indices)} in all)]" if len(indices) > limit else f"[{shown}]"


def frame_text(frame: dict[str, Any]) -> str:
    """`name (file.py:line)` the way py-spy prints it, plus the source line when known."""
    if frame.get("native"):
        lib = (frame.get("file") or "").rsplit("/", 1)[-1]
        return f"{frame.get('name')} [{lib}]" if lib else str(frame.get("name"))
    where = (frame.get("file") or "?").rsplit("/", 1)[-1]
    text = f"{frame.get('name')} ({where}:{frame.get('line')})"
    if frame.get("code"):
        text += f"  `{frame['code']}`"
    return text


def main_thread(threads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The thread that does the process's work: the worker loop, the script's main thread."""
    if not threads:
        return None

    def score(thread: dict[str, Any]) -> int:
        names = [f.get("name") or "" for f in thread.get("frames") or []]
        if any(n == "_worker_loop" for n in names):
            return 0
        if thread.get("name") in ("MainThread", "current"):
            return 1
        if any(f.get("user") for f in thread.get("frames") or []):
            return 2
        return 3

    return min(threads, key=score)


def own_frames(thread: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The thread's frames, innermost first, without those a forked worker inherited from its parent
    (everything outside torch's _worker_loop is the parent's call stack at fork time)."""
    frames = (thread or {}).get("frames") or []
    for i, frame in enumerate(frames):
        if frame.get("name") == "_worker_loop" and not frame.get("native"):
            return frames[: i + 1]
    return frames


def user_frames(thread: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [f for f in own_frames(thread) if f.get("user")]


def innermost_user_frame(thread: dict[str, Any] | None) -> dict[str, Any] | None:
    frames = user_frames(thread)
    return frames[0] if frames else None


def _inner(thread: dict[str, Any] | None, depth: int = 12) -> list[dict[str, Any]]:
    return ((thread or {}).get("frames") or [])[:depth]


def _names(frames: list[dict[str, Any]]) -> str:
    return " ".join(f"{f.get('name')} {f.get('file') or ''}" for f in frames)


def _blocked_target(proc: dict[str, Any]) -> str:
    target = proc.get("fd_target")
    if target:
        if target.startswith("pipe:"):
            return f"a pipe ({target}) that no one writes to"
        if target.startswith("socket:"):
            return f"a socket ({target}) whose peer sends nothing"
        return f"the file {target}"
    if proc.get("state") == "D":
        return "storage that does not answer (uninterruptible I/O, typical of a hung NFS/FUSE mount or disk)"
    return f"a read ({proc.get('syscall') or proc.get('wchan')})"


def stopped_cause(proc: dict[str, Any]) -> Cause | None:
    """A process stopped by SIGSTOP, Ctrl-Z or a debugger makes no progress whatever its code: that is the cause
    (never the stack it had, which cannot be read while it is stopped)."""
    state = proc.get("state")
    pid = proc.get("pid")
    if state not in STOPPED_STATES or not isinstance(pid, int):
        return None
    return Cause(
        "stopped",
        f"stopped, so it runs no code at all: {stopped_note(pid, state)}",
        f"Let it continue: `kill -CONT {pid}`, `fg` in the shell where Ctrl-Z stopped it, or continue in the "
        "debugger attached to it.",
        {k: proc.get(k) for k in ("state", "wchan", "syscall", "cpu_share", "threads")},
    )


# fork-lock's other start methods, replaced where the run showed they would fail (findings/hangs, start_blockers)
FORK_LOCK_OTHER_METHODS = "or use multiprocessing_context='spawn' or 'forkserver'"


def classify(proc: dict[str, Any], fork_threads: list[str] | None, start_method: str | None) -> Cause:
    """The most likely reason this process makes no progress."""
    stopped = stopped_cause(proc)
    if stopped is not None:
        return stopped
    thread = main_thread(proc.get("stack") or [])
    frames = _inner(thread, 40)
    names = _names(frames)
    user = innermost_user_frame(thread)
    kernel = {k: proc.get(k) for k in ("state", "wchan", "syscall", "fd_target", "cpu_share", "threads")}
    wchan = proc.get("wchan") or ""
    syscall = proc.get("syscall") or ""
    cpu = proc.get("cpu_share") or 0.0
    if _OPENMP.search(names):
        return Cause(
            "openmp-fork",
            "an OpenMP parallel region (libgomp/MKL) that never starts: the thread pool was used before the "
            "fork, and its threads do not exist in the worker",
            "Keep workers at one intra-op thread (do not call torch.set_num_threads(>1) in worker_init_fn; set "
            "OMP_NUM_THREADS=1 for the workers), avoid OpenMP work in the parent before creating the iterator, "
            "or use multiprocessing_context='spawn' or 'forkserver'.",
            kernel,
        )
    if _OPENCV.search(names):
        return Cause(
            "opencv-threads",
            "inside OpenCV, whose thread pool was started in the parent before the workers were forked",
            "Call cv2.setNumThreads(0) (at import, or in worker_init_fn) and cv2.ocl.setUseOpenCL(False), or use "
            "multiprocessing_context='spawn'.",
            kernel,
        )
    lock_native = bool(_LOCK_NATIVE.search(_names(_inner(thread, 8))))
    lock_python = bool(user and _LOCK_LINE.search(user.get("code") or "")) or any(
        (f.get("name") or "").endswith(("acquire", "Lock.__enter__")) for f in _inner(thread, 3) if not f.get("native")
    )
    futex = "futex" in wchan or syscall == "futex"
    if (lock_native or lock_python) and (futex or cpu < 0.05) and syscall not in _READ_SYSCALLS:
        others = [t for t in fork_threads or [] if t]
        if start_method in ("fork", None) and others:
            return Cause(
                "fork-lock",
                "waiting for a lock that was held by another thread of the training process when the workers "
                f"were forked (threads alive at fork: {', '.join(others[:5])}); the worker inherited the lock "
                "locked, and the thread that would release it does not exist in the worker",
                "Do not hold locks in background threads while workers are forked: start such threads in "
                "worker_init_fn or after iter(loader) with persistent_workers=True (without it each epoch forks "
                f"again while they run), create the lock in worker_init_fn, {FORK_LOCK_OTHER_METHODS}. Loggers, "
                "tqdm and telemetry threads are common holders.",
                {**kernel, "threads_at_fork": others},
            )
        return Cause(
            "lock-wait",
            "waiting for a lock that another thread or process holds and does not release",
            "Find who holds the lock (the other stacks in the hang record) and release it, or give the wait "
            "a timeout; a lock shared between workers serialises them.",
            kernel,
        )
    if proc.get("state") == "D" or syscall in _READ_SYSCALLS or (_READ_WCHANS.search(wchan) and not futex):
        return Cause(
            "blocked-read",
            f"blocked reading {_blocked_target(proc)}",
            "Find why the data source does not answer (a hung network filesystem or object store, a FIFO or "
            "socket with no writer). Give network reads a timeout (socket.settimeout, requests timeout=...), "
            "and set DataLoader(timeout=...) so a stuck read raises instead of hanging the job.",
            kernel,
        )
    if cpu >= BUSY_CPU_SHARE:
        return Cause(
            "busy",
            f"computing, not blocked (it used {cpu:.0%} of a CPU while being watched): an endless loop or a "
            "sample far slower than the others",
            "Look at the stuck frame for a loop that never ends on this sample (a retry loop, a while over "
            "malformed data); time __getitem__ for this index with num_workers=0.",
            kernel,
        )
    if syscall in _SLEEP_SYSCALLS or "sleep" in names:
        return Cause(
            "sleep",
            "sleeping (time.sleep or a retry back-off) for longer than the hang timeout",
            "Bound the retries and their back-off, or raise --hang-timeout if this wait is expected.",
            kernel,
        )
    native = native_wait(thread)
    if native is not None:
        pool = start_method in ("fork", None) and (futex or cpu < 0.05)
        return Cause(
            "native-wait",
            f"waiting inside {possessive(native.library)} native code ({native.shared_object}: {native.function})"
            + (
                ", most likely for its own thread pool: the pool was started in the parent before the workers "
                "forked, and its threads do not exist in the worker"
                if pool
                else ""
            ),
            f"Keep {possessive(native.library)} thread pool out of the parent before the workers fork (do not use "
            "it there, or turn its parallelism off with its thread-count setting or environment variable), or start "
            "the workers with multiprocessing_context='forkserver' or 'spawn'.",
            {
                **kernel,
                "native_library": native.library,
                "native_object": native.shared_object,
                "native_function": native.function,
            },  # fmt: skip
        )
    return Cause(
        "unknown",
        "idle in the kernel with no recognisable cause in its stack",
        "Read the full stack in the hang record; py-spy dump --native --pid PID shows native frames too.",
        kernel,
    )


def main_wait_cause(main: dict[str, Any]) -> Cause:
    """Why the training process itself makes no progress while no worker holds a batch."""
    stopped = stopped_cause(main)
    if stopped is not None:
        return stopped
    threads = main.get("stack") or []
    pin = next((t for t in threads if "_pin_memory_loop" in _names(t.get("frames") or [])), None)
    kernel = {k: main.get(k) for k in ("state", "wchan", "syscall", "cpu_share", "threads")}
    if pin is not None:
        inner = _names(_inner(pin, 6))
        if not _QUEUE_FRAMES.search(inner):
            return Cause(
                "pin-thread",
                "the pin-memory thread is stuck while pinning a batch, so batches the workers made never reach "
                "the loop",
                "Try pin_memory=False; with persistent_workers=True and pin_memory=True avoid re-creating the "
                "iterator; update torch.",
                kernel,
            )
    thread = main_thread(threads)
    if thread is not None and _QUEUE_FRAMES.search(_names(_inner(thread, 12))):
        return Cause(
            "queue-wait",
            "waiting on the workers' result queue while no worker is working on a batch: the batch it waits "
            "for was lost (a worker that died without being noticed, or a batch sent by a worker of another "
            "iterator)",
            "Check the worker stacks and the loader's errors; set DataLoader(timeout=...) so the wait raises.",
            kernel,
        )
    return classify(main, None, None)
