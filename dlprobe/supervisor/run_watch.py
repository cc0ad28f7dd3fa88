"""Watches a started target until it exits: its process tree's memory, hangs, stacks and the live view; then keeps
what it can of the script's stderr and writes result.json."""

from __future__ import annotations

import importlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO, Any

import psutil
from rich.text import Text

from dlprobe import atomic
from dlprobe.console import escape_controls
from dlprobe.rundir.files import JsonlTail, write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    EV_BATCHES,
    EV_EPOCH,
    EV_LOADER,
    EV_PROCESS,
    EV_START_METHOD,
    HANGS_DIR,
    ORPHAN_GRACE_S,
    RESULT_FILE,
    SAMPLES_FILE,
    STACKS_FILE,
    STDERR_FILE,
    Meta,
    PromMeta,
    Result,
)
from dlprobe.supervisor import own_checks
from dlprobe.supervisor.budget import CpuBudget
from dlprobe.supervisor.hang.guard import RunGuard
from dlprobe.supervisor.live import LiveView
from dlprobe.supervisor.live_summary import LiveSummaryWriter
from dlprobe.supervisor.problems import Problems
from dlprobe.supervisor.prom.exporter import Exporter
from dlprobe.supervisor.prom.setup import PromSetup
from dlprobe.supervisor.run_options import RunOptions, TickHook, machine_facts, own_cost
from dlprobe.supervisor.sampler import TICK_S, Sampler
from dlprobe.supervisor.stack_recorder import StackRecorder
from dlprobe.supervisor.stderr_copy import StderrOrigin, keep_stderr
from dlprobe.system import cgroup, shm_files
from dlprobe.units import format_bytes

# A signal's previous handler, as signal.signal returns it.
SignalHandler = Callable[[int, FrameType | None], Any] | int | None


# A loader is known by (the pid of the process that built it, its id in that process): every rank has a loader 0.
LoaderKey = tuple[int, int]


class Progress:
    """What the live view shows, folded from the events the hooks write."""

    def __init__(self) -> None:
        self.batches: dict[LoaderKey, int] = {}
        self.wait_s: dict[LoaderKey, float] = {}
        # worker pid -> (pid of the process that built its loader, loader id, worker id)
        self.workers: dict[int, tuple[int, int, int]] = {}
        self.ranks: dict[int, int | None] = {}  # pid of each process that built a DataLoader -> its rank
        # What the Prometheus exposition labels its series with (supervisor/prom/metrics.py)
        self.identity: dict[int, dict[str, Any]] = {}  # each such process's EV_PROCESS: local rank, host
        self.start_methods: dict[LoaderKey, str] = {}
        self.last_batch_at: dict[LoaderKey, float] = {}  # the writer's clock at its last batches event

    def feed(self, events: list[dict[str, Any]], sampler: Sampler) -> None:
        for ev in events:
            kind = ev.get("ev")
            writer = int(ev.get("pid") or 0)
            if kind == EV_PROCESS:
                # A rank of a job (any process that builds a DataLoader): sampled from now on as a main process.
                self.ranks[writer] = ev.get("rank")
                self.identity[writer] = ev
                sampler.add_pid(writer)
            elif kind in (EV_LOADER, EV_START_METHOD) and isinstance(ev.get("start_method"), str):
                # the loader's configured method, then the one its workers were really started with
                self.start_methods[(writer, ev.get("loader", 0))] = ev["start_method"]
            elif kind == EV_EPOCH:
                for w in ev.get("workers") or []:
                    self.workers[int(w["pid"])] = (writer, ev["loader"], w["worker_id"])
                    sampler.add_pid(int(w["pid"]), worker=True)
                for th in ev.get("threads") or []:  # workers that are threads of the writer
                    sampler.add_thread(writer, int(th["tid"]))
            elif kind == EV_BATCHES:
                key = (writer, ev["loader"])
                self.batches[key] = ev.get("total", 0)
                if isinstance(ev.get("t"), (int, float)):
                    self.last_batch_at[key] = ev["t"]
                # a folded chunk (a long run's) keeps a sample of its waits and their exact sum
                chunk_wait = ev.get("wait_s") if ev.get("n") else None
                chunk_wait = chunk_wait if isinstance(chunk_wait, (int, float)) else sum(ev.get("waits") or [])
                self.wait_s[key] = self.wait_s.get(key, 0.0) + chunk_wait

    def mains(self, target_pid: int) -> list[int]:
        """The processes whose loop the hang guard watches: every process that built a DataLoader, else the target."""
        return sorted(self.ranks) if self.ranks else [target_pid]

    def _loader_name(self, key: LoaderKey) -> str:
        pid, lid = key
        rank = self.ranks.get(pid)
        if rank is not None:
            return f"rank{rank}/loader{lid}"
        if len({p for p, _ in self.batches}) > 1:
            return f"pid{pid}/loader{lid}"
        return f"loader{lid}"

    def status(self, elapsed: float, sampler: Sampler) -> Text:
        text = Text()
        text.append("dlprobe ", style="bold cyan")
        text.append(f"{elapsed:6.1f}s ")
        for key, n in sorted(self.batches.items(), key=lambda kv: (self.ranks.get(kv[0][0]) or 0, kv[0])):
            text.append(f" {self._loader_name(key)}: {n} batches")
        live_workers = [pid for pid in self.workers if pid not in sampler.gone]
        uss = [sampler.last.get(pid, {}).get("uss") for pid in live_workers]
        known = [u for u in uss if u is not None]
        if live_workers:
            text.append(f"  workers: {len(live_workers)}")
            if known:
                text.append(f" USS max {format_bytes(max(known))}", style="yellow")
        shm = sampler.last_system.get("shm")
        if shm:
            text.append(f"  /dev/shm {format_bytes(shm['used'])}")
        return text


def watch(
    child: subprocess.Popen[bytes],
    run_dir: Path,
    options: RunOptions,
    meta: Meta,
    previous: dict[signal.Signals, SignalHandler],
    stderr_at_start: StderrOrigin,
    prom: PromSetup | None = None,
) -> int:
    """Record the started target until it exits (and its workers with it); write meta.json and result.json, restore
    the signal handlers in `previous`, and return the target's exit code. `prom`: the Prometheus exposition's
    checked options, closed here."""
    started = meta["started_at"]
    meta["machine"] = machine_facts()
    memcg = cgroup.memory_dir(child.pid)
    meta["cgroup"] = str(memcg[0]) if memcg else None
    memory = cgroup.memory_state(memcg)
    meta["cgroup_limit_dir"] = memory.get("limit_dir") if memory else None  # where a parent's limit binds the run
    problems = Problems()
    view = LiveView(options.live)
    exporter = None
    if prom is not None:
        exporter = Exporter(prom, run_dir, problems, started, child.pid)
        meta["prometheus"] = exporter.meta()
        _say_where_metrics_are(view, meta["prometheus"])
    summary = None
    if options.log_to:
        summary = LiveSummaryWriter(run_dir, problems, child.pid)
        meta["log_to"] = list(options.log_to)
    _write_or_record(problems, RunDir(run_dir).meta, meta, "the report lacks the script's command line and machine")

    _preload(options.preload)
    guard = RunGuard(run_dir, child, options.hang_timeout, options.on_hang, view.notice, problems=problems)
    stacks = StackRecorder(child.pid, run_dir, options.stack_rate)
    known: set[int] = set()
    orphans: list[psutil.Process] = []
    stopped: list[int] = []
    budget = CpuBudget()
    try:
        known, orphans = _sample_until_exit(
            child, run_dir, view, started, guard, stacks, options.on_tick, budget, problems, exporter, summary
        )
        # dlprobe ended the run (--on-hang stop: "end the run and every worker") or started it for itself (tune):
        # what is left is dlprobe's to stop. Else the workers are the script's, left running as python leaves them.
        if orphans and (guard.watch.stopped or options.stop_leftovers):
            stopped, orphans = _stop(orphans), []
        late = own_checks.wait_for(str(run_dir.resolve()))  # what the sample check finds goes in the report
        if late:
            problems.record("sample check", TimeoutError(f"still running after {own_checks.WAIT_S:g} s: stopped"),
                            "the outcome of loading the failing sample again is missing")  # fmt: skip
    finally:
        try:
            stacks.stop()
        except OSError as exc:
            problems.record(f"{STACKS_FILE} write", exc, "the stack samples are cut short or missing")
        view.close()
        if exporter is not None:
            exporter.close()  # before result.json: a file it could not remove is one of the run's problems
        for sig, handler in previous.items():
            if sig != signal.SIGINT:
                signal.signal(sig, handler)
    returncode = child.returncode
    exit_code = returncode if returncode >= 0 else 128 - returncode
    finished = guard.finish(known)
    leftovers = shm_files.remove_leftovers(known | {child.pid}, started)
    try:
        stderr_kept = keep_stderr(stderr_at_start, run_dir)
    except OSError as exc:  # the run directory is full or gone: the script's output itself was never at stake
        problems.record(f"{STDERR_FILE} write", exc, f"{STDERR_FILE} misses the end of the script's stderr")
        stderr_kept = {"kind": stderr_at_start.kind, "written_bytes": None, "kept_bytes": 0, "problem": str(exc)}
    result: Result = {
        "returncode": returncode,
        "exit_code": exit_code,
        "signal": signal.Signals(-returncode).name if returncode < 0 else None,
        "ended_at": time.time(),
        "supervisor": {**own_cost(), **budget.summary()},
        **finished,
        "stderr": stderr_kept,
    }
    if leftovers:
        result["shm_removed"] = [{"name": name, "bytes": size} for name, size in leftovers]
    if orphans:
        result["orphans_left"] = [proc.pid for proc in orphans]
    if stopped:
        result["orphans_stopped"] = stopped
    if problems.as_list():
        result["problems"] = problems.as_list()
    try:
        write_json(RunDir(run_dir).result, result)
    except OSError as exc:
        problems.record(f"{RESULT_FILE} write", exc, "the report lacks the exit status")
    if problems.disk_stop is not None:
        _say_recording_stopped(problems.disk_stop, started, run_dir)
    signal.signal(signal.SIGINT, previous[signal.SIGINT])
    return exit_code


def _say_where_metrics_are(view: LiveView, where: PromMeta) -> None:
    if "listen" in where:
        view.notice(f"Prometheus metrics at http://{where['listen']}/metrics (job {where['job']})")
    if "textfile" in where:
        view.notice(f"Prometheus metrics in {where['textfile']} (job {where['job']}), removed at the end")


def _stop(procs: list[psutil.Process]) -> list[int]:
    """SIGKILL the workers still running; the pids stopped (one that exited meanwhile is not counted; psutil checks
    the start time, so a reused pid is never hit)."""
    stopped = []
    for proc in procs:
        try:
            proc.kill()
            stopped.append(proc.pid)
        except psutil.Error:  # noqa: S110 - it exited meanwhile: nothing left to stop
            pass
    return stopped


def _write_or_record(problems: Problems, path: Path, data: Any, consequence: str) -> None:
    try:
        write_json(path, data)
    except OSError as exc:  # a full or read-only disk stops the recording, never the run
        problems.record(f"{path.name} write", exc, consequence)


def _say_recording_stopped(stop: tuple[str, OSError, float], started: float, run_dir: Path) -> None:
    """One line on stderr: where the recording stopped and why (the script ran on; its exit code is dlprobe's)."""
    where, exc, at = stop
    line = (
        f"dlprobe: the recording stopped {max(0.0, at - started):.1f} s into the run at {where}: "
        f"{exc.strerror or exc} in {run_dir}; the script ran on and its exit code is kept"
    )
    try:
        sys.stderr.write(escape_controls(line) + "\n")
        sys.stderr.flush()
    except OSError:  # noqa: S110 - stderr itself is gone: the exit code still says how the script ended
        pass


def _preload(modules: tuple[str, ...]) -> None:
    """Import what the caller needs after the run now, while the target's interpreter starts on another core.

    Before the CPU budget starts counting: this is the report's cost, paid earlier, not the probe's."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S110 - the caller's own import after the run raises it again, and reports it
            pass


def _exit_waiter(child: subprocess.Popen[bytes]) -> Callable[[float], bool]:
    """wait(timeout) -> whether the child has exited (and is reaped). Popen.wait(timeout) polls every few
    milliseconds (about 20 wake-ups a second, a third of the idle supervisor's CPU); a pidfd sleeps until the
    exit or the timeout."""

    def polling(timeout: float) -> bool:
        try:
            child.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    try:
        fd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # Linux < 5.3, or not Linux
        return polling
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def sleeping(timeout: float) -> bool:
        if child.returncode is None and not poller.poll(timeout * 1000):
            return False
        child.wait()
        os.close(fd)
        return True

    return sleeping


def _sample_until_exit(
    child: subprocess.Popen[bytes],
    run_dir: Path,
    view: LiveView,
    started: float,
    guard: RunGuard,
    stacks: StackRecorder,
    on_tick: TickHook | None = None,
    budget: CpuBudget | None = None,
    problems: Problems | None = None,
    exporter: Exporter | None = None,
    summary: LiveSummaryWriter | None = None,
) -> tuple[set[int], list[psutil.Process]]:
    """Sample until the target exits and its workers with it; the pids seen, and the workers still running after it."""
    orphans: list[psutil.Process] = []
    cgroup_dir = cgroup.memory_dir(child.pid)
    events = JsonlTail(RunDir(run_dir).events)
    progress = Progress()
    exited = _exit_waiter(child)
    problems = problems if problems is not None else Problems()
    recording = {"stacks": True, "hangs": True}  # what a full disk has stopped
    try:
        samples: IO[str] = atomic.create_file(RunDir(run_dir).samples)
    except OSError as exc:
        problems.record(f"{SAMPLES_FILE} write", exc, "no memory or CPU samples: the report has no memory findings")
        samples = open(os.devnull, "w")  # noqa: SIM115 - closed below; the readings still feed the guard and view
    sampler = Sampler(child.pid, samples, cgroup_dir, budget)
    try:
        try:
            while True:
                now = time.time()
                new_events = events.read_new()
                progress.feed(new_events, sampler)
                if recording["stacks"]:
                    try:  # py-spy only while the loop waits for data; start-up is sampled inside
                        stacks.observe(new_events, now)
                    except OSError as exc:
                        recording["stacks"] = False
                        problems.record(f"{STACKS_FILE} write", exc, "stack sampling stopped: the hotspots are partial")
                if on_tick is not None:
                    on_tick(now, new_events, child)
                sampler.tick(now)
                if recording["hangs"]:
                    try:
                        guard.tick(
                            now, sorted(sampler.known - sampler.gone), progress.workers, progress.mains(child.pid)
                        )
                    except OSError as exc:
                        recording["hangs"] = False
                        problems.record(f"{HANGS_DIR}/ write", exc, "hangs from here on are not recorded")
                if exporter is not None:
                    exporter.refresh(now, progress, sampler, guard.watch.count)
                if summary is not None:
                    summary.refresh(now, progress, sampler)
                if view.enabled:
                    view.update(progress.status(now - started, sampler))
                # Wake for the next full round on time, so a moving worker's USS is read every ROUND_S.
                if exited(min(TICK_S, max(0.01, sampler.next_full - time.time()))):
                    break
            # Workers can outlive their main process: for a moment at a normal exit, until their next status check
            # when it was killed (torchrun stopping a rank; torch checks every 5 s), forever when one is blocked in
            # __getitem__. Keep recording them for that long, then name the ones left: they are left running, as
            # plain python leaves them (no signal of dlprobe's reaches a process of the script's).
            progress.feed(events.read_new(), sampler)
            sampler.tick(time.time())
            deadline = time.time() + ORPHAN_GRACE_S
            while sampler.live_workers() and time.time() < deadline:
                time.sleep(TICK_S)
                sampler.tick(time.time())
                if exporter is not None:  # the workers still running stay on the dashboards until they exit
                    exporter.refresh(time.time(), progress, sampler, guard.watch.count)
            orphans = list(sampler.live_workers())
        finally:
            sampler.close()
            if sampler.out_error is not None:
                at = sampler.out_stopped_at
                problems.record(
                    f"{SAMPLES_FILE} write",
                    sampler.out_error,
                    f"the memory and CPU samples stop {max(0.0, (at or started) - started):.1f} s into the run",
                    at=at,
                )
    finally:
        try:
            samples.close()
        except OSError as exc:  # its last buffer could not be written: a full disk must not end the watch
            if sampler.out_error is None:
                problems.record(f"{SAMPLES_FILE} write", exc, "the last samples are missing")
    return sampler.known, orphans
