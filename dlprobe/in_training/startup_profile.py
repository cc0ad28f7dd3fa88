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
        self.samples = 0
        self.truncated_s = 0.0
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
        while not self._stop.wait(interval):
            frame = sys._current_frames().get(self.main_id)  # type: ignore[arg-type]
            now = time.perf_counter()
            # Weight by the time since the last sample: imports hold the GIL, so wake-ups come late.
            weight, last = now - last, now
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
                else:
                    self.truncated_s += weight
            if time.time() - self.started > SLOWER_AFTER_S:
                interval = SLOW_INTERVAL_S

    def stop(self, reason: str) -> None:
        """Stop sampling and write one `startup_profile` event (idempotent)."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=1.0)
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


def profile_seconds() -> list[tuple[tuple[Frame, ...], float]] | None:
    """Each sampled stack of the main thread and its seconds, from start to the first loader's iteration (both
    phases); None where nothing was profiled (DLPROBE_NO_STARTUP_PROFILE, or a process probed only at its loader)."""
    if _profiler is None:
        return None
    with _profiler._lock:
        merged: dict[tuple[Frame, ...], float] = {}
        for (_phase, stack), seconds in _profiler.seconds.items():
            merged[stack] = merged.get(stack, 0.0) + seconds
    return list(merged.items())
