"""Samples the training process's main-thread Python stack from script start until the first DataLoader forks."""

from __future__ import annotations

import os
import sys
import threading
import time
from types import FrameType

from dlprobe.frames import is_probe_file, is_remedy_file
from dlprobe.in_training.event_log import get_log
from dlprobe.rundir.schema import EV_STARTUP_PROFILE, NO_STARTUP_PROFILE_ENV

INTERVAL_S = 0.01  # 100 Hz while start-up is short; slower later so a 30-minute directory walk stays cheap
SLOW_INTERVAL_S = 0.05
SLOWER_AFTER_S = 30.0
# The main thread's scheduler counters are read this often, and the last RECENT_S of them give its share of a core
# just before the loader (start readiness predicts the workers' start-up from it: the probe's own supervisor competes
# with the script's first seconds, not with the workers)
SCHED_EVERY_S = 0.25
RECENT_S = 2.0
MAX_DEPTH = 40
MAX_DISTINCT = 4000  # distinct stacks kept; beyond this, new ones are counted as truncated
TOP_STACKS = 80
THREAD_NAME = "dlprobe-startup-sampler"

Frame = tuple[str, str, int]


def _stack(frame: FrameType | None) -> tuple[Frame, ...]:
    frames: list[Frame] = []
    while frame is not None and len(frames) < MAX_DEPTH:
        code = frame.f_code
        filename = code.co_filename
        # The probe's and runpy's frames are not the user's start-up; a remedy from dlprobe.fixes the script calls is.
        if not is_probe_file(filename) or is_remedy_file(filename):
            frames.append(
                (filename, code.co_qualname if hasattr(code, "co_qualname") else code.co_name, frame.f_lineno)
            )
        frame = frame.f_back
    frames.reverse()  # outermost first, as a profiler prints them
    return tuple(frames)


class StartupProfiler:
    """A daemon thread that aggregates (phase, stack) -> seconds; stopped before any fork so workers never see it."""

    def __init__(self) -> None:
        self.main_id = threading.main_thread().ident
        self.started = time.time()
        self.loader_created: float | None = None
        self.seconds: dict[tuple[str, tuple[Frame, ...]], float] = {}
        self.cpu: dict[tuple[str, tuple[Frame, ...]], float] = {}  # the main thread's CPU seconds per stack
        self.samples = 0
        self.truncated_s = 0.0
        self._main_clock = _thread_clock(self.main_id)
        self.cpu_at_start = _clock_s(self._main_clock)
        self.cpu_at_stop: float | None = None
        self._main_native = threading.main_thread().native_id
        self.sched: list[tuple[float, int, int]] = []  # (perf_counter, on-CPU ns, waiting-for-a-CPU ns), the last ones
        self._stop = threading.Event()
        self._done = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def mark_loader_created(self) -> None:
        if self.loader_created is None:
            self.loader_created = time.time()

    def _run(self) -> None:
        interval = INTERVAL_S
        last = time.perf_counter()
        last_cpu = self.cpu_at_start
        with self._lock:
            self._keep_sched(last)
        while not self._stop.wait(interval):
            frame = sys._current_frames().get(self.main_id)  # type: ignore[arg-type]
            now = time.perf_counter()
            # Weight by the time since the last sample: imports hold the GIL, so wake-ups come late.
            weight, last = now - last, now
            cpu_now = _clock_s(self._main_clock)
            cpu_weight = cpu_now - last_cpu if cpu_now is not None and last_cpu is not None else None
            last_cpu = cpu_now
            if not self.sched or now - self.sched[-1][0] >= SCHED_EVERY_S:
                with self._lock:
                    self._keep_sched(now)
            if frame is None:
                continue
            stack = _stack(frame)
            del frame
            phase = "before_loader" if self.loader_created is None else "after_loader"
            key = (phase, stack)
            with self._lock:
                self.samples += 1
                if key in self.seconds or len(self.seconds) < MAX_DISTINCT:
                    self.seconds[key] = self.seconds.get(key, 0.0) + weight
                    if cpu_weight is not None:
                        self.cpu[key] = self.cpu.get(key, 0.0) + cpu_weight
                else:
                    self.truncated_s += weight
            if time.time() - self.started > SLOWER_AFTER_S:
                interval = SLOW_INTERVAL_S

    def _keep_sched(self, now: float) -> None:
        reading = _sched_ns(self._main_native)
        if reading is not None:
            self.sched.append((now, *reading))
            if len(self.sched) > 4 * RECENT_S / SCHED_EVERY_S:
                del self.sched[0]

    def stop(self, reason: str) -> None:
        """Stop sampling and write one `startup_profile` event (idempotent)."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=1.0)
        self.cpu_at_stop = _clock_s(self._main_clock)
        with self._lock:
            self._keep_sched(time.perf_counter())
        with self._lock:
            top = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)[:TOP_STACKS]
            total = sum(self.seconds.values()) + self.truncated_s
        log = get_log()
        if log is None:
            return
        log.emit(
            EV_STARTUP_PROFILE,
            reason=reason,
            started=self.started,
            stopped=time.time(),
            loader_created=self.loader_created,
            samples=self.samples,
            sampled_s=round(total, 3),
            truncated_s=round(self.truncated_s, 3),
            stacks=[
                {"phase": phase, "seconds": round(s, 3), "frames": [list(f) for f in stack]}
                for (phase, stack), s in top
            ],
        )


_profiler: StartupProfiler | None = None


def start() -> None:
    """Start sampling (once per process); every fork stops it first, so no worker inherits a probe thread."""
    global _profiler
    if _profiler is not None or os.environ.get(NO_STARTUP_PROFILE_ENV):
        return
    _profiler = StartupProfiler()
    _profiler.start()
    os.register_at_fork(before=lambda: stop("fork"))


def mark_loader_created() -> None:
    if _profiler is not None:
        _profiler.mark_loader_created()


def stop(reason: str) -> None:
    if _profiler is not None:
        _profiler.stop(reason)


def is_running() -> bool:
    return _profiler is not None and not _profiler._done


def profile_seconds(cpu: bool = False) -> list[tuple[tuple[Frame, ...], float]] | None:
    """Each sampled stack of the main thread and its seconds (wall, or with `cpu` the main thread's CPU time), from
    start to the first loader's iteration (both phases); None where nothing was profiled (DLPROBE_NO_STARTUP_PROFILE,
    or a process probed only at its loader)."""
    if _profiler is None:
        return None
    with _profiler._lock:
        merged: dict[tuple[Frame, ...], float] = {}
        for (_phase, stack), seconds in (_profiler.cpu if cpu else _profiler.seconds).items():
            merged[stack] = merged.get(stack, 0.0) + seconds
    return list(merged.items())


def main_thread_cpu_s() -> float | None:
    """The main thread's CPU seconds from the interpreter's start to the profile's stop (None: not profiled, not
    stopped, or no per-thread clock here)."""
    return None if _profiler is None else _profiler.cpu_at_stop


def recent_runnable() -> tuple[float, float] | None:
    """(on-CPU seconds, runnable seconds) of the main thread over the last RECENT_S before the profile stopped, or
    None where its scheduler counters were not read."""
    if _profiler is None or not _profiler._done:
        return None
    with _profiler._lock:
        readings = list(_profiler.sched)
    if len(readings) < 2:
        return None
    end = readings[-1]
    start = next((r for r in reversed(readings[:-1]) if end[0] - r[0] >= RECENT_S), readings[0])
    on_cpu, waited = (end[1] - start[1]) / 1e9, (end[2] - start[2]) / 1e9
    return on_cpu, on_cpu + waited


def _thread_clock(ident: int | None) -> int | None:
    try:
        return time.pthread_getcpuclockid(ident) if ident is not None else None
    except (AttributeError, OSError):  # not on this platform
        return None


def _clock_s(clock: int | None) -> float | None:
    try:
        return time.clock_gettime(clock) if clock is not None else None
    except OSError:  # the thread has ended
        return None


def _sched_ns(native_id: int | None) -> tuple[int, int] | None:
    """The thread's (on-CPU ns, waiting-for-a-CPU ns) from /proc (Linux with schedstats), else None."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            on_cpu, waited = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return None
    return on_cpu, waited
