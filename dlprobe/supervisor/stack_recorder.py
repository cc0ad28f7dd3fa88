"""Samples the Python stacks of the workers (or the training process) from outside, one at a time, with py-spy."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlprobe import atomic
from dlprobe.rundir.files import write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    EV_BATCHES,
    EV_EPOCH,
    SAMPLER_ENDED,
    SAMPLER_FAILED,
    SAMPLER_MISSING,
    SAMPLER_OFF,
    SAMPLER_OK,
    StacksMeta,
)
from dlprobe.system import procinfo
from dlprobe.system.pyspy import NO_PYTHON_PROCESSES, PY_SPY_ENV, error_line, find_py_spy

RATE_ENV = "DLPROBE_STACK_RATE"
# samples/s of the one process sampled at a time. benchmarks/hotspot_cost.py (py-spy 0.4, --nonblocking, 2 busy
# cores): 1.4-1.5% of a core at 20 Hz whatever the number of workers, against 3.3% (2 workers) and 6.8% (8 workers)
# for `--subprocesses` over the whole tree at 10 Hz, which read every process on every tick.
DEFAULT_RATE = 20
# Sampling costs the target CPU, so it runs only where it can pay off: once the loop is seen waiting for data
# (hotspots are reported only then), and for a bounded window.
START_WAIT_SHARE = 0.3
START_AFTER_S = 1.0  # of batches seen, so the first batches' start-up does not decide
WINDOW_S = 20.0  # the longest window
# The window lasts only as long as it adds information: it ends once ENOUGH_SAMPLES of the workers inside their
# fetch path (the samples the finding ranks) are in, which rank the top functions within a few percent (the share
# of a function seen in 200 samples is off by 3.5% at most, one sigma): 10 s at 20 Hz at best. The
# workers' own clocks (worker_batches rows) already split their time into fetch and collate, CPU and waiting, so
# the stacks only have to name the functions.
ENOUGH_SAMPLES = 200
# It ends sooner where the ranking is as sure already: the share p of a function is known to within SHARE_SE (one
# sigma) after p(1-p)/SHARE_SE^2 samples, 204 at p = 0.5 (ENOUGH_SAMPLES) but 73 where one function takes 90% and
# none at all where it takes everything, the common case of a loader with one slow call (a decode, a read); never
# before MIN_RANKED samples, so that a function seen in none of them yet still has a chance to show.
SHARE_SE = 0.035
MIN_RANKED = 60
# One worker at a time, in turn, for BURST_S each (py-spy's --duration takes whole seconds): the workers of a loader
# run the same code, so taking them in turn ranks the same functions as sampling all of them at once, at the cost of
# one. A burst is long enough that py-spy's ~10 ms attach stays a small part of its cost.
BURST_S = 2


class StackRecorder:
    """`py-spy record --nonblocking --idle` on one worker at a time, in turn, while the loop starves; never pauses
    a process, and samples one process at a time whatever the number of workers."""

    def __init__(self, pid: int, run_dir: Path, rate: int | None = None) -> None:
        self.pid = pid
        self.run_dir = run_dir
        self.files = RunDir(run_dir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.exe: str | None = None
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
        self.workers: dict[int, None] = {}  # worker pids in the order seen (an ordered set): the ones to take in turn
        self.workers_seen = False
        self.failed: set[int] = set()  # processes whose burst left no stacks: not tried again
        self.mains: dict[int, None] = {}  # training processes that timed batches: sampled where no worker is known
        self.window_s = WINDOW_S
        self.burst_pid: int | None = None
        self.bursts = 0
        self.sampled: list[int] = []  # pids whose burst left stacks
        self.cpu_s = 0.0  # py-spy's own CPU time over every burst
        self.fetch_samples = 0  # samples inside a worker's fetch path so far: what the finding ranks
        self.functions: Counter[str] = Counter()  # those samples by the function the finding names
        self.failures: list[tuple[str, bool]] = []  # each burst that left no stacks: py-spy's error, process gone
        self.process_exists: Callable[[int], bool] = procinfo.exists

    def observe(self, events: list[dict[str, Any]], now: float) -> None:
        """Start when the loop has waited for data a large share of the time; take the workers in turn until the
        window ends."""
        for ev in events:
            if ev.get("ev") == EV_EPOCH:
                for worker in ev.get("workers") or []:
                    if isinstance(worker, dict) and isinstance(worker.get("pid"), int):
                        self.workers[worker["pid"]] = None
                        self.workers_seen = True
            if ev.get("ev") == EV_BATCHES:
                waits = ev.get("waits") or []
                pid = int(ev.get("pid") or 0)
                if pid:
                    self.mains[pid] = None
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
                self.start(now)
        elif self.started_at is not None:
            if now - self.started_at > self.window_s:
                self.finish()
            elif self.proc is None or self._reaped(self.proc):
                self._collect()
                if ranked_enough(self.functions):
                    self.finish()
                else:
                    self._next_burst()

    def finish(self) -> None:
        """End the sampling window early: py-spy writes what it has on SIGINT."""
        if self.started_at is not None:
            self.window_s = min(WINDOW_S, time.time() - self.started_at)  # the window it took, in stacks.json
        self.started_at = None
        self._end_burst()

    def start(self, now: float | None = None) -> None:
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
        self.exe = exe
        self.started_at = time.time() if now is None else now
        os.close(atomic.create_fd(self.files.stacks))  # the bursts append to it
        self._next_burst()

    def _targets(self) -> list[int]:
        # The workers (of every loader and rank) when any were seen: none alive between two epochs of non-persistent
        # workers means waiting for the next ones, not sampling the main process, which does not load. Else the
        # training processes, which fetch themselves with num_workers=0; else the target itself.
        if self.workers or self.workers_seen:
            # A worker that has exited (the loop's end, the script's exit) is not worth a py-spy start: its CPU on a
            # busy machine delays the target's own exit, and stop() then waits for py-spy to give up on it
            # (benchmarks/wall_timeline.py: 0.07-0.25 s after a 2 s script's exit, 0 with this check).
            return [pid for pid in self.workers if self.process_exists(pid)]
        return list(self.mains) or ([self.pid] if self.pid not in self.failed else [])

    def _next_burst(self) -> None:
        targets = self._targets()
        if not targets:
            return  # observe() tries again on its next tick
        pid = targets[self.bursts % len(targets)]
        self.bursts += 1
        self.burst_pid = pid
        # --idle: a sample blocked on a read is loading time too; hotspots drop workers idling for their next index.
        command = [str(self.exe), "record", "--pid", str(pid), "--nonblocking", "--idle", "--rate", str(self.rate),
                   "--duration", str(BURST_S), "--format", "raw", "--output", str(self._burst_file())]  # fmt: skip
        try:
            os.close(atomic.create_fd(self._burst_file()))  # py-spy writes it by name: never through a link there
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=atomic.create_binary(self.files.py_spy_log),  # this burst's error only
                start_new_session=True,  # a Ctrl-C for the script must not stop the sampler first
            )
        except OSError as exc:
            self.proc, self.started_at = None, None
            self.status, self.error = SAMPLER_FAILED, f"could not start py-spy: {exc}"

    def _burst_file(self) -> Path:
        return self.files.stacks_burst

    def _end_burst(self, wait_s: float = 5.0) -> None:
        """Stop the running burst (py-spy writes what it has on SIGINT) and keep its stacks."""
        proc = self.proc
        if proc is None:
            return
        if not self._reaped(proc):
            proc.send_signal(signal.SIGINT)
            if not self._reaped(proc, wait_s):
                proc.kill()
                self._reaped(proc, wait_s)
        self._collect()

    def _reaped(self, proc: subprocess.Popen[bytes], wait_s: float = 0.0) -> bool:
        """Whether py-spy has exited (waiting up to wait_s); reaped here with wait4 so its CPU time is counted: the
        sampler's cost is what the target loses, and stacks.json says it."""
        deadline = time.monotonic() + wait_s
        while proc.returncode is None:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: no CPU time to add
                proc.returncode = -1
                break
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                self.cpu_s += usage.ru_utime + usage.ru_stime
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _collect(self) -> None:
        """Append the finished burst's stacks to stacks.txt under `process PID:`, as `--subprocesses` writes them."""
        proc, pid, burst = self.proc, self.burst_pid, self._burst_file()
        self.proc = None
        if proc is None or pid is None:
            return
        try:
            lines = atomic.read_text(burst, errors="replace").splitlines()
            burst.unlink()
        except OSError:
            lines = []
        functions = _fetch_functions(lines)
        self.functions.update(functions)
        self.fetch_samples += sum(functions.values())
        if lines:
            with open(atomic.append_fd(self.files.stacks), "a") as out:
                # a thread with no Python frame (py-spy writes its count alone) says nothing of where time goes
                out.writelines(f'process {pid}:"burst";{line}\n' for line in lines if line.rpartition(" ")[0].strip())
            self.sampled.append(pid)
        elif proc.returncode not in (0, -signal.SIGINT):
            error = _log_error(self.files.py_spy_log) or f"py-spy exited with {proc.returncode}"
            # A process gone by now had ended before py-spy could read it (py-spy on one pid says "Failed to get
            # process executable name", with --subprocesses "No python processes found"): nothing to sample.
            self.failures.append((error, not Path(f"/proc/{pid}").exists() or bool(NO_PYTHON_PROCESSES.search(error))))
            # Most often the worker had ended (non-persistent workers at an epoch's end): not worth another burst.
            self.workers.pop(pid, None)
            self.mains.pop(pid, None)
            self.failed.add(pid)

    def stop(self, wait_s: float = 5.0) -> None:
        """After the target exits: end the running burst and say how sampling went."""
        if self.proc is not None:
            # py-spy exits by itself once its process has gone (or at the burst's end); a py-spy stopped first
            # would hide why it failed.
            self._reaped(self.proc, wait_s)
        self.finish()
        if self.started and self.status == SAMPLER_OK and not self.sampled and self.failures:
            # Only a sampler that never saved a stack failed: a later burst on a worker that had ended (an epoch's
            # end, non-persistent workers) is not a gap in the profile.
            failed = [error for error, ended in self.failures if not ended]
            # py-spy attaches after the loop first starves; a script that ended in between left it nothing
            self.status = SAMPLER_FAILED if failed else SAMPLER_ENDED
            self.error = failed[-1] if failed else self.failures[-1][0]
        if self.started:
            # Read back by analysis/findings/probe.py: a failed sampler must be said, not leave a silent gap.
            meta: StacksMeta = {
                "rate": self.rate,
                "window_s": self.window_s,
                "status": self.status,
                "error": self.error,
                "burst_s": BURST_S,
                "sampled_pids": self.sampled,
                "cpu_s": round(self.cpu_s, 3),
                "fetch_samples": self.fetch_samples,
            }
            write_json(self.files.stacks_meta, meta)


def ranked_enough(functions: Counter[str]) -> bool:
    """Whether the samples so far (by function) rank every function's share within SHARE_SE: ENOUGH_SAMPLES at
    most, fewer where the shares are far from even."""
    total = sum(functions.values())
    if total >= ENOUGH_SAMPLES:
        return True
    if total < MIN_RANKED:
        return False
    return all(n / total * (1 - n / total) <= SHARE_SE**2 * total for n in functions.values())


def _fetch_functions(lines: list[str]) -> Counter[str]:
    """Samples of a burst that the hotspot finding ranks (inside fetch(), not in the probe's own recording), by the
    function it names for them."""
    from dlprobe.analysis.measures.fetch_stacks import in_fetch, in_probe, rank  # once a burst ends: not at start-up
    from dlprobe.analysis.run.stackfile import parse_stacks

    stacks = parse_stacks("".join(f"process 0:;{line}\n" for line in lines))
    return rank([s for s in in_fetch(stacks) if not in_probe(s)])[1]


def _log_error(path: Path) -> str | None:
    try:
        return error_line(atomic.read_text(path, errors="replace"))
    except OSError:
        return None
