"""Samples the Python stacks of the training process and its workers from outside with `py-spy record`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from dlprobe.rundir.files import write_json
from dlprobe.rundir.schema import (
    EV_BATCHES,
    EV_EPOCH,
    PY_SPY_LOG_FILE,
    SAMPLER_ENDED,
    SAMPLER_FAILED,
    SAMPLER_MISSING,
    SAMPLER_OFF,
    SAMPLER_OK,
    STACKS_FILE,
    STACKS_META_FILE,
    StacksMeta,
)
from dlprobe.system.pyspy import NO_PYTHON_PROCESSES, PY_SPY_ENV, error_line, find_py_spy

RATE_ENV = "DLPROBE_STACK_RATE"
DEFAULT_RATE = 10  # samples/s: enough to rank hotspots within the window; py-spy used ~10% of a core on 9 processes
# Sampling costs the target CPU, so it runs only where it can pay off: once the loop is seen waiting for data
# (hotspots are reported only then), and for a bounded window.
START_WAIT_SHARE = 0.3
START_AFTER_S = 1.0  # of batches seen, so the first batches' start-up does not decide
WINDOW_S = 20.0  # the longest window
# The window lasts only as long as it adds information: ENOUGH_SAMPLES of the workers rank the top functions
# within a few percent (the share of a function seen in 200 samples is off by 3.5% at most, one sigma), so with
# many workers the window shrinks; py-spy costs each watched process CPU on every sample.
ENOUGH_SAMPLES = 200
MIN_WINDOW_S = 3.0


def window_for(rate: int, workers: int) -> float:
    """Seconds of sampling that give ENOUGH_SAMPLES of the workers (or of the main process with no workers)."""
    return min(WINDOW_S, max(MIN_WINDOW_S, ENOUGH_SAMPLES / (max(rate, 1) * max(workers, 1))))


class StackRecorder:
    """One `py-spy record --subprocesses --nonblocking` for the whole tree while the loop starves; never pauses it."""

    def __init__(self, pid: int, run_dir: Path, rate: int | None = None) -> None:
        self.pid = pid
        self.run_dir = run_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        self.status = SAMPLER_OK
        try:
            self.rate = int(os.environ.get(RATE_ENV, DEFAULT_RATE)) if rate is None else rate
        except ValueError:
            self.rate = DEFAULT_RATE
        self.started = False
        self.started_at: float | None = None
        self.first_batch_t: float | None = None
        self.wait_s = 0.0
        self.wait_by_pid: dict[int, float] = {}
        self.workers = 0
        self.window_s = WINDOW_S

    def observe(self, events: list[dict[str, Any]], now: float) -> None:
        """Start when the loop has waited for data a large share of the time; stop after the window."""
        for ev in events:
            if ev.get("ev") == EV_EPOCH:
                self.workers = max(self.workers, len(ev.get("workers") or []))
            if ev.get("ev") == EV_BATCHES:
                waits = ev.get("waits") or []
                pid = int(ev.get("pid") or 0)
                if self.first_batch_t is None:
                    self.first_batch_t = ev["t"] - sum(waits)
                if pid not in self.wait_by_pid:
                    waits = waits[1:]  # each process's first batch is start-up, not steady waiting
                self.wait_by_pid[pid] = self.wait_by_pid.get(pid, 0.0) + sum(waits)
        # Ranks wait side by side: the share is the most any one training process waited, not their sum.
        self.wait_s = max(self.wait_by_pid.values(), default=0.0)
        if not self.started and self.first_batch_t is not None:
            span = now - self.first_batch_t
            if span >= START_AFTER_S and self.wait_s >= START_WAIT_SHARE * span:
                self.start()
        elif self.started_at is not None and now - self.started_at > self.window_s:
            self.finish()

    def finish(self) -> None:
        """End the sampling window early: py-spy writes what it has on SIGINT."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.started_at = None

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        exe = find_py_spy()
        if self.rate <= 0:
            self.status, self.error = SAMPLER_OFF, f"stack sampling turned off ({RATE_ENV}={self.rate})"
            return
        override = os.environ.get(PY_SPY_ENV)
        if exe is None and override == "":
            self.status, self.error = SAMPLER_OFF, f"py-spy turned off ({PY_SPY_ENV} is empty)"
            return
        if exe is None:  # a mistyped DLPROBE_PY_SPY is a gap to report, not a wish to turn sampling off
            self.status = SAMPLER_MISSING
            where = f" at {PY_SPY_ENV}={override}" if override else ""
            self.error = f"py-spy not found{where} (pip install py-spy, or point {PY_SPY_ENV} at it)"
            return
        # --idle: a sample blocked on a read is loading time too; hotspots drop workers idling for their next index.
        self.window_s = window_for(self.rate, self.workers)
        output = str(self.run_dir / STACKS_FILE)
        command = [exe, "record", "--pid", str(self.pid), "--subprocesses", "--nonblocking", "--idle",
                   "--rate", str(self.rate), "--format", "raw", "--output", output]  # fmt: skip
        self.started_at = time.time()
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=(self.run_dir / PY_SPY_LOG_FILE).open("wb"),
                start_new_session=True,  # a Ctrl-C for the script must not stop the sampler first
            )
        except OSError as exc:
            self.status, self.error = SAMPLER_FAILED, f"could not start py-spy: {exc}"

    def stop(self, wait_s: float = 5.0) -> None:
        """After the target exits py-spy writes its file and exits; make it do so if it does not."""
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)  # py-spy writes what it has on Ctrl-C
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.returncode not in (0, -signal.SIGINT) and not (self.run_dir / STACKS_FILE).exists():
                self.error = _log_error(self.run_dir / PY_SPY_LOG_FILE) or f"py-spy exited with {proc.returncode}"
                # py-spy attaches after the loop first starves; a script that ended in between left it nothing
                self.status = SAMPLER_ENDED if NO_PYTHON_PROCESSES.search(self.error) else SAMPLER_FAILED
        if self.started:
            # Read back by analysis/probe_findings.py: a failed sampler must be said, not leave a silent gap.
            meta: StacksMeta = {
                "rate": self.rate,
                "window_s": self.window_s,
                "status": self.status,
                "error": self.error,
            }
            write_json(self.run_dir / STACKS_META_FILE, meta)


def _log_error(path: Path) -> str | None:
    try:
        return error_line(path.read_text(errors="replace"))
    except OSError:
        return None
