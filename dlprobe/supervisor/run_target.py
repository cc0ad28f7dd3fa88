"""`dlprobe run`: start the unmodified script under the hooks, sample it from outside, outlive it."""

from __future__ import annotations

import os
import platform
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import psutil
from rich.text import Text

from dlprobe import __version__
from dlprobe.errors import DlprobeError
from dlprobe.rundir.files import JsonlTail, create_run_dir, write_json
from dlprobe.rundir.schema import (
    EV_BATCHES,
    EV_EPOCH,
    EV_PROCESS,
    EVENTS_FILE,
    LAUNCH_COMMAND,
    LAUNCH_MODULE,
    LAUNCH_SCRIPT,
    META_FILE,
    ORPHAN_GRACE_S,
    RESULT_FILE,
    RUN_DIR_ENV,
    RUN_SCHEMA_VERSION,
    SAMPLES_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    Machine,
    Meta,
    Result,
    SupervisorCost,
)
from dlprobe.supervisor import launch
from dlprobe.supervisor.budget import CpuBudget
from dlprobe.supervisor.hang.guard import RunGuard
from dlprobe.supervisor.hang.watch import DEFAULT_HANG_TIMEOUT_S, ON_HANG_CHOICES
from dlprobe.supervisor.live import LiveView
from dlprobe.supervisor.problems import Problems
from dlprobe.supervisor.sampler import TICK_S, Sampler
from dlprobe.supervisor.stack_recorder import StackRecorder
from dlprobe.system import cgroup, procmem, shm_files
from dlprobe.system.cpus import cpu_facts
from dlprobe.units import format_bytes

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


# Called every tick with the time, the new events and the target, e.g. by `dlprobe check` to end a bounded run.
TickHook = Callable[[float, list[dict[str, Any]], subprocess.Popen[bytes]], None]


@dataclass
class RunOptions:
    script: str  # the script, the module (-m) or the command's program (--)
    args: list[str] = field(default_factory=list)
    out: str | None = None
    live: bool = True
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the target
    on_tick: TickHook | None = None
    hang_timeout: float = DEFAULT_HANG_TIMEOUT_S
    on_hang: str = "wait"
    launch: str = LAUNCH_SCRIPT  # LAUNCH_SCRIPT | LAUNCH_MODULE | LAUNCH_COMMAND
    stack_rate: int | None = None  # py-spy's samples/s; None: $DLPROBE_STACK_RATE or the default; 0: off


@dataclass
class RunOutcome:
    run_dir: Path
    exit_code: int


def check_script(script: str) -> None:
    path = Path(script)
    if not path.exists():
        raise DlprobeError(f"script not found: {script}", hint="give the path of your training script, e.g. train.py")
    if path.is_dir():
        raise DlprobeError(f"{script} is a directory, not a script", hint="give the path of a .py file")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise DlprobeError(f"cannot read {script}: {exc.strerror}", hint="check the file's permissions") from None


def check_target(script: str, launch_kind: str, args: list[str] | None = None) -> None:
    """The script exists, the module name is one, the command's program is on PATH; else one error line, exit 2."""
    if launch_kind == LAUNCH_MODULE:
        launch.check_module(script)
    elif launch_kind == LAUNCH_COMMAND:
        launch.check_command([script, *(args or [])])
    else:
        check_script(script)


def check_hang_options(options: RunOptions) -> None:
    if options.hang_timeout < 0:
        raise DlprobeError(
            f"--hang-timeout must be 0 (off) or a number of seconds, not {options.hang_timeout:g}",
            hint=f"e.g. --hang-timeout {DEFAULT_HANG_TIMEOUT_S:g}",
        )
    if options.on_hang not in ON_HANG_CHOICES:
        raise DlprobeError(
            f"--on-hang must be one of {', '.join(ON_HANG_CHOICES)}, not {options.on_hang!r}",
            hint="wait: keep waiting after the stacks are saved; stop: end the run",
        )


def machine_facts() -> Machine:
    shm = procmem.shm_usage()
    mem = procmem.system_memory()
    facts: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        # cpu_count, cpu_affinity, cpu_quota (cgroup, in cores) and usable_cores (the smallest of them)
        **cpu_facts(),
        "mem_total": mem["total"],
        "mem_available": mem["available"],
        "shm_total": shm["total"] if shm else None,
    }
    return cast(Machine, facts)


class _Pump(threading.Thread):
    """Copies one of the script's output pipes to our own stream, byte for byte, and to a log file."""

    def __init__(self, source: IO[bytes], target_fd: int, log_path: Path, view: LiveView, problems: Problems) -> None:
        super().__init__(daemon=True)
        self.source = source
        self.target_fd = target_fd
        self.log_path = log_path
        self.view = view
        self.problems = problems

    def run(self) -> None:
        # Unbuffered: a failing write raises here, where it is recorded, not again when the file is closed.
        with self.log_path.open("wb", buffering=0) as log:
            fd = self.source.fileno()
            while True:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.view.forward(self.target_fd, data)
                try:
                    log.write(data)
                    log.flush()
                except OSError as exc:  # the script's output still passes through; only the copy is cut
                    self.problems.record(
                        f"{self.log_path.name} write", exc, f"{self.log_path.name} misses part of the script's output"
                    )


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

    def feed(self, events: list[dict[str, Any]], sampler: Sampler) -> None:
        for ev in events:
            kind = ev.get("ev")
            writer = int(ev.get("pid") or 0)
            if kind == EV_PROCESS:
                # A rank of a job (any process that builds a DataLoader): sampled from now on as a main process.
                self.ranks[writer] = ev.get("rank")
                sampler.add_pid(writer)
            elif kind == EV_EPOCH:
                for w in ev.get("workers") or []:
                    self.workers[int(w["pid"])] = (writer, ev["loader"], w["worker_id"])
                    sampler.add_pid(int(w["pid"]), worker=True)
            elif kind == EV_BATCHES:
                key = (writer, ev["loader"])
                self.batches[key] = ev.get("total", 0)
                self.wait_s[key] = self.wait_s.get(key, 0.0) + sum(ev.get("waits") or [])

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


def run_script(options: RunOptions) -> RunOutcome:
    """Run the script, module or command under the probe; returns the run directory and the target's exit code."""
    check_target(options.script, options.launch, options.args)
    check_hang_options(options)
    command = launch.target_command(options.launch, options.script, options.args)
    env = dict(os.environ)
    launch.inject(env)
    run_dir = create_run_dir(options.out, launch.run_name(options.launch, options.script, options.args))
    started = time.time()
    meta: Meta = {
        "schema_version": RUN_SCHEMA_VERSION,
        "dlprobe_version": __version__,
        "script": options.script,
        "argv": options.args,
        "launch": options.launch,
        "command": [options.script, *options.args] if options.launch == LAUNCH_COMMAND else command[3:],
        "node_rank": launch.node_rank([options.script, *options.args]),
        "cwd": os.getcwd(),
        "started_at": started,
        "machine": machine_facts(),
    }
    env[RUN_DIR_ENV] = str(run_dir.resolve())
    # The script writes into pipes now; unbuffered keeps its output as timely as on a terminal.
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(options.env)
    (run_dir / EVENTS_FILE).touch()
    view = LiveView(options.live)
    child = _start(command, env)
    meta["target_pid"] = child.pid
    memcg = cgroup.memory_dir(child.pid)
    meta["cgroup"] = str(memcg[0]) if memcg else None
    memory = cgroup.memory_state(memcg)
    meta["cgroup_limit_dir"] = memory.get("limit_dir") if memory else None  # where a parent's limit binds the run
    write_json(run_dir / META_FILE, meta)

    assert child.stdout is not None and child.stderr is not None
    problems = Problems()
    pumps = [
        _Pump(child.stdout, sys.stdout.fileno(), run_dir / STDOUT_FILE, view, problems),
        _Pump(child.stderr, sys.stderr.fileno(), run_dir / STDERR_FILE, view, problems),
    ]
    for pump in pumps:
        pump.start()

    previous = {sig: signal.signal(sig, lambda s, _f: child.send_signal(s)) for sig in FORWARDED_SIGNALS}
    # Ctrl-C reaches the whole process group; the script decides what it means, we keep recording.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    guard = RunGuard(
        run_dir, child, options.hang_timeout, options.on_hang, lambda text: _notice(view, text), problems=problems
    )
    stacks = StackRecorder(child.pid, run_dir, options.stack_rate)
    known: set[int] = set()
    orphans: list[int] = []
    budget = CpuBudget()
    try:
        known, orphans = _sample_until_exit(child, run_dir, view, started, guard, stacks, options.on_tick, budget)
    finally:
        stacks.stop()
        for pump in pumps:
            pump.join(timeout=5)
        view.close()
        for sig, handler in previous.items():
            if sig != signal.SIGINT:
                signal.signal(sig, handler)
    returncode = child.returncode
    exit_code = returncode if returncode >= 0 else 128 - returncode
    finished = guard.finish(known)
    leftovers = shm_files.remove_leftovers(known | {child.pid}, started)
    result: Result = {
        "returncode": returncode,
        "exit_code": exit_code,
        "signal": signal.Signals(-returncode).name if returncode < 0 else None,
        "ended_at": time.time(),
        "supervisor": {**_own_cost(), **budget.summary()},
        **finished,
    }
    if leftovers:
        result["shm_removed"] = [{"name": name, "bytes": size} for name, size in leftovers]
    if orphans:
        result["orphans_stopped"] = orphans
    if problems.as_list():
        result["problems"] = problems.as_list()
    write_json(run_dir / RESULT_FILE, result)
    signal.signal(signal.SIGINT, previous[signal.SIGINT])
    return RunOutcome(run_dir, exit_code)


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:  # checked before, but a command can vanish, lack a #! line, or meet E2BIG
        raise DlprobeError(
            f"cannot start {command[0]}: {exc.strerror or exc}",
            hint="check that the command runs on its own, without dlprobe",
        ) from None


def _own_cost() -> SupervisorCost:
    """What probing cost: the supervisor's own CPU seconds and peak RSS (the target is not counted)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "max_rss_bytes": usage.ru_maxrss * 1024}


def _notice(view: LiveView, text: str) -> None:
    if view.enabled:
        view.forward(sys.stderr.fileno(), f"[dlprobe] {text}\n".encode())


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
) -> tuple[set[int], list[int]]:
    """Sample until the target exits and its workers with it; the pids seen, and the workers that had to be stopped."""
    orphans: list[int] = []
    cgroup_dir = cgroup.memory_dir(child.pid)
    events = JsonlTail(run_dir / EVENTS_FILE)
    progress = Progress()
    exited = _exit_waiter(child)
    with (run_dir / SAMPLES_FILE).open("w") as samples:
        sampler = Sampler(child.pid, samples, cgroup_dir, budget)
        while True:
            now = time.time()
            new_events = events.read_new()
            progress.feed(new_events, sampler)
            stacks.observe(new_events, now)  # py-spy only while the loop waits for data; start-up is sampled inside
            if on_tick is not None:
                on_tick(now, new_events, child)
            sampler.tick(now)
            guard.tick(now, sorted(sampler.known - sampler.gone), progress.workers, progress.mains(child.pid))
            if view.enabled:
                view.update(progress.status(now - started, sampler))
            # Wake for the next full round on time, so a moving worker's USS is read every ROUND_S.
            if exited(min(TICK_S, max(0.01, sampler.next_full - time.time()))):
                break
        # Workers can outlive their main process: for a moment at a normal exit, until their next status check
        # when it was killed (torchrun stopping a rank; torch checks every 5 s), forever when one is blocked in
        # __getitem__. Keep recording them for that long, then stop the ones left: they serve no loader any more.
        progress.feed(events.read_new(), sampler)
        sampler.tick(time.time())
        deadline = time.time() + ORPHAN_GRACE_S
        while sampler.live_workers() and time.time() < deadline:
            time.sleep(TICK_S)
            sampler.tick(time.time())
        for proc in sampler.live_workers():
            try:
                proc.kill()
                orphans.append(proc.pid)
            except psutil.Error:  # noqa: S110 - it exited meanwhile: nothing left to stop
                pass
    return sampler.known, orphans
