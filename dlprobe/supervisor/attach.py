"""`dlprobe attach PID`: watch a job that is already running, from outside, without disturbing it.

No hooks run in the job: the tree is found in /proc (`attach_tree`), sampled by the same `Sampler` as `dlprobe
run` for the window, and at the end each training process and worker gets one `py-spy dump --nonblocking` (never
paused). The run directory has the usual samples.jsonl, meta.json (marked `attached`), result.json (no exit
code: the job goes on), attach.json (the tree, CPU time over the window, stacks) and an events.jsonl written by
dlprobe itself that names each training process's workers as a loader, so the memory analyzers read an attached
run as they read a probed one. Nothing is sent to the job: no signal, no ptrace stop; Ctrl-C ends the window.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlprobe import __version__, atomic
from dlprobe.rundir.files import create_run_dir, write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    EV_EPOCH,
    EV_LOADER,
    EV_PROCESS,
    LAUNCH_COMMAND,
    LAUNCH_SCRIPT,
    RUN_SCHEMA_VERSION,
    AttachRecord,
    Meta,
    Result,
)
from dlprobe.supervisor.attach_tree import ROLE_MAIN, ROLE_WORKER, Proc, Target, resolve
from dlprobe.supervisor.budget import CpuBudget
from dlprobe.supervisor.hang import procstate, stacks
from dlprobe.supervisor.run_options import machine_facts, own_cost
from dlprobe.supervisor.sampler import DISCOVER_EVERY_S, TICK_S, Sampler
from dlprobe.system import cgroup, kernlog, procinfo
from dlprobe.system.pyspy import find_py_spy

DEFAULT_DURATION_S = 30.0
MAX_STACKS = 32  # py-spy dumps at the end of the window: the training processes first, then their workers
PARALLEL_DUMPS = 2
# Workers that started within this long of each other were started together (one epoch's set of workers).
GENERATION_GAP_S = 1.0


@dataclass
class AttachOptions:
    pid: int
    duration_s: float = DEFAULT_DURATION_S
    out: str | None = None


def _cpu_s(state: dict[str, Any] | None, hz: int) -> float | None:
    return None if state is None else state["cpu_ticks"] / hz


DEATH_POLL_S = 0.02


class _DeathWatch(threading.Thread):
    """Notices within DEATH_POLL_S when a training process or worker ends, and how (a worker killed by the OOM
    killer and the ones torch stops after it all go within one sampler tick; the order is the story). A killed
    process's wait status is readable only while it is a zombie, until its parent reaps it: caught when seen."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="dlprobe-attach-deaths")
        self.pids: set[int] = set()
        self.gone_at: dict[int, float] = {}
        self.exit: dict[int, int | None] = {}
        self.done = threading.Event()

    def watch(self, pid: int) -> None:
        self.pids.add(pid)

    def run(self) -> None:
        while not self.done.wait(DEATH_POLL_S):
            for pid in list(self.pids - set(self.gone_at)):
                gone, how = procinfo.exit_state(pid)
                if gone:
                    self.gone_at[pid] = time.time()
                    self.exit[pid] = how


class _Window:
    """The processes of the tree over the window: when each was first seen, its CPU time then, when it went."""

    def __init__(self, target: Target, sampler: Sampler, deaths: _DeathWatch) -> None:
        self.target = target
        self.sampler = sampler
        self.hz = procstate.clock_ticks_per_s()
        self.first_seen: dict[int, float] = {}
        self.cpu_start: dict[int, float | None] = {}
        self.next_refresh = 0.0
        self.deaths = deaths

    def add(self, procs: list[Proc], now: float) -> None:
        for proc in procs:
            if proc.role in (ROLE_MAIN, ROLE_WORKER):
                self.deaths.watch(proc.pid)
            self.first_seen.setdefault(proc.pid, now)
            self.cpu_start.setdefault(proc.pid, _cpu_s(procstate.read_state(proc.pid), self.hz))
            self.sampler.add_pid(proc.pid, worker=proc.role == ROLE_WORKER)

    def tick(self, now: float) -> None:
        if now >= self.next_refresh:
            self.add(self.target.refresh(), now)
            self.next_refresh = now + DISCOVER_EVERY_S
        self.sampler.tick(now)

    def all_gone(self) -> bool:
        return all(pid in self.sampler.gone for pid in self.first_seen)


def _rerun_command(target: Target) -> str:
    """The `dlprobe run` command that starts the same job under the hooks."""
    root = target.procs[target.root_pid]
    mains = target.mains()
    if root.role == ROLE_MAIN and len(root.cmdline) >= 2:
        return "dlprobe run " + shlex.join(root.cmdline[1:])
    if root.cmdline:
        return "dlprobe run -- " + shlex.join(root.cmdline)
    return "dlprobe run " + (shlex.join(mains[0].cmdline[1:]) if mains else "train.py")


def _dump_stacks(targets: list[int]) -> tuple[dict[int, stacks.DumpResult], dict[str, Any] | None]:
    """One non-blocking py-spy dump per process; the first tells whether ptrace is allowed at all."""
    exe = find_py_spy()
    if exe is None:
        return {}, {"kind": "missing", "advice": stacks.MISSING_ADVICE}
    if not targets:
        return {}, None
    results = {targets[0]: stacks.py_spy_dump(exe, targets[0], native=False, nonblocking=True)}
    first = results[targets[0]]
    if first.permission_denied:
        return results, {"kind": "permission", "error": first.error, "advice": stacks.PERMISSION_ADVICE}
    with ThreadPoolExecutor(max_workers=PARALLEL_DUMPS) as pool:
        rest = targets[1:]
        dumps = pool.map(lambda pid: stacks.py_spy_dump(exe, pid, native=False, nonblocking=True), rest)
        results.update(zip(rest, dumps, strict=True))
    failed = [r for r in results.values() if not r.threads and r.error]
    if failed and len(failed) == len(results):
        return results, {"kind": "failed", "error": failed[0].error, "advice": ""}
    return results, None


def _generations(workers: list[Proc], first_seen: dict[int, float]) -> list[list[Proc]]:
    """Workers grouped by when they started: each group is one set of a loader's workers (one epoch's)."""
    groups: list[list[Proc]] = []
    last: float | None = None
    for proc in workers:
        started = proc.started if proc.started is not None else first_seen.get(proc.pid, 0.0)
        if last is None or started - last > GENERATION_GAP_S:
            groups.append([])
        groups[-1].append(proc)
        last = started
    return groups


def _start_method(main: Proc, workers: list[Proc]) -> str:
    """fork when a worker has its training process's command line (a forked copy), else spawn."""
    if any(w.cmdline == main.cmdline for w in workers):
        return "fork"
    if any("forkserver" in " ".join(p.cmdline) for p in workers):
        return "forkserver"
    return "spawn" if workers else "fork"


def synthetic_events(target: Target, first_seen: dict[int, float], t0: float) -> list[dict[str, Any]]:
    """What the hooks would have said about the tree's shape: each training process's workers as one loader,
    one epoch per set of workers started together; a `process` event per training process when several ranks
    were found (so the report is a job report). Marked `attached`: no batch, wait or dataset is known."""
    events: list[dict[str, Any]] = []
    mains = target.mains()
    several = len(mains) > 1 or any((m.to_dict().get("world_size") or 1) > 1 for m in mains)
    host = socket.gethostname()
    for main in mains:
        ident = main.to_dict()
        workers = target.workers(main.pid)
        if several:
            events.append(
                {
                    "ev": EV_PROCESS,
                    "t": t0,
                    "pid": main.pid,
                    "ppid": main.ppid,
                    "rank": ident["rank"],
                    "local_rank": ident["local_rank"],
                    "world_size": ident["world_size"],
                    "node_rank": None,
                    "host": host,
                    "argv": main.cmdline,
                    "attached": True,
                }
            )
        if not workers:
            continue
        generations = _generations(workers, first_seen)
        events.append(
            {
                "ev": EV_LOADER,
                "t": t0,
                "pid": main.pid,
                "loader": 0,
                "num_workers": max(len(g) for g in generations),
                "start_method": _start_method(main, workers),
                "attached": True,
            }
        )
        for epoch, group in enumerate(generations):
            seen = min(first_seen.get(w.pid, t0) for w in group)
            events.append(
                {
                    "ev": EV_EPOCH,
                    "t": seen,
                    "pid": main.pid,
                    "loader": 0,
                    "epoch": epoch,
                    "iter_s": 0.0,
                    "workers": [{"pid": w.pid, "worker_id": i} for i, w in enumerate(group)],
                    "attached": True,
                }
            )
    return events


def _meta(options: AttachOptions, target: Target, started: float) -> Meta:
    mains = target.mains()
    root = target.procs[target.root_pid]
    # the training process's own command when there is one, so the report names the script
    shown = mains[0] if len(mains) == 1 else root
    words = shown.cmdline[1:] if shown.python and len(shown.cmdline) > 1 else shown.cmdline
    memcg = cgroup.memory_dir(mains[0].pid)
    memory = cgroup.memory_state(memcg)
    return {
        "schema_version": RUN_SCHEMA_VERSION,
        "dlprobe_version": __version__,
        "script": words[0] if words else (shown.comm or "?"),
        "argv": words[1:],
        "launch": LAUNCH_SCRIPT if len(mains) == 1 else LAUNCH_COMMAND,
        "command": root.cmdline,
        "node_rank": None,
        "cwd": str(Path.cwd()),
        "started_at": started,
        "machine": machine_facts(),
        # one training process: it is what the report calls main; several: the launcher at the top of the tree
        "target_pid": mains[0].pid if len(mains) == 1 else target.root_pid,
        "cgroup": str(memcg[0]) if memcg else None,
        "cgroup_limit_dir": memory.get("limit_dir") if memory else None,
        "attached": True,
        "attached_pid": options.pid,
    }


def attach(options: AttachOptions, notice: Callable[[str], None] = lambda _text: None) -> Path:
    """Watch the job for the window (Ctrl-C ends it early) and write the run directory; returns its path."""
    target = resolve(options.pid)
    for note in target.notes:
        notice(note)
    mains = target.mains()
    name = Path(mains[0].cmdline[1] if len(mains[0].cmdline) > 1 else "job").stem
    run_dir = create_run_dir(options.out, f"attach-{name}-{options.pid}")
    files = RunDir(run_dir)
    started = time.time()
    write_json(files.meta, _meta(options, target, started))
    memcg = cgroup.memory_dir(mains[0].pid)
    budget = CpuBudget()
    stop = threading.Event()
    deaths = _DeathWatch()
    boot_start, kmsg_fd = kernlog.since_boot(), kernlog.open_at_end()  # the kernel log from now on: OOM kills
    # Ctrl-C ends the window (the job is in another process group and never sees it); once the report is being
    # written it aborts as usual.
    previous = signal.signal(signal.SIGINT, lambda _s, _f: stop.set())
    sampler: Sampler | None = None
    try:
        with contextlib.ExitStack() as stack:
            samples = stack.enter_context(atomic.create_file(files.samples))
            sampler = Sampler(target.root_pid, samples, memcg, budget)
            stack.callback(sampler.close)  # its held readings are written before the file closes
            # The tree is walked by `Target.refresh` (which leaves dlprobe itself out); the sampler only reads.
            sampler.next_discover = math.inf
            window = _Window(target, sampler, deaths)
            window.add(sorted(target.procs.values(), key=lambda p: p.pid), started)
            deaths.start()
            deadline = started + options.duration_s
            notice(
                f"watching {len(mains)} training process(es) and {len(target.workers())} DataLoader worker(s) of "
                f"pid {target.root_pid} for {options.duration_s:g}s (Ctrl-C ends the watch, not the job)"
            )
            while not stop.is_set():
                now = time.time()
                window.tick(now)
                if now >= deadline or window.all_gone():
                    break
                stop.wait(max(0.01, min(TICK_S, sampler.next_full - time.time(), deadline - time.time())))
            # One last full reading of every process, so each one's growth spans the whole window (a still process
            # is otherwise read only every few seconds).
            sampler.last_full.clear()
            sampler.next_full = 0.0
            window.tick(time.time())
    finally:
        signal.signal(signal.SIGINT, previous)
        deaths.done.set()
    interrupted = stop.is_set()
    if interrupted:
        notice("interrupted: writing the report of what was sampled (the job was not touched)")
    ended = time.time()
    record = _finish(target, window, sampler.gone, started, ended, interrupted)
    write_json(files.attach, record)
    records = kernlog.read_records(fd=kmsg_fd) if kmsg_fd is not None else None
    write_json(files.kernel, kernlog.oom_kills(set(window.first_seen), boot_start - 1.0, records))
    with atomic.create_file(files.events) as f:
        for ev in synthetic_events(target, window.first_seen, started):
            f.write(json.dumps(ev, separators=(",", ":")) + "\n")
    result: Result = {"ended_at": ended, "supervisor": {**own_cost(), **budget.summary()}}
    write_json(files.result, result)
    return run_dir


def _finish(
    target: Target, window: _Window, gone: set[int], started: float, ended: float, interrupted: bool
) -> AttachRecord:
    """Each process's CPU time over the window, its state now and its stack (py-spy, never pausing it)."""
    entries: list[dict[str, Any]] = []
    states: dict[int, dict[str, Any] | None] = {}
    for pid in sorted(window.first_seen):
        states[pid] = None if pid in gone else procstate.read_state(pid)
    live = [p for p in target.mains() + target.workers() if states.get(p.pid) is not None]
    results, problem = _dump_stacks([p.pid for p in live[:MAX_STACKS]])
    for pid in sorted(window.first_seen):
        proc = target.procs[pid]
        state = states.get(pid)
        end_cpu = _cpu_s(state, window.hz)
        start_cpu = window.cpu_start.get(pid)
        entry: dict[str, Any] = {
            **proc.to_dict(),
            "first_seen": round(window.first_seen[pid], 3),
            "gone": state is None,
            "gone_t": window.deaths.gone_at.get(pid),  # within DEATH_POLL_S (the sampler's "gone" within a tick)
            "exit": window.deaths.exit.get(pid),  # -N: killed by signal N; None where it was reaped before seen
            "cpu_s": round(end_cpu - start_cpu, 3) if end_cpu is not None and start_cpu is not None else None,
            "seen_s": round(ended - window.first_seen[pid], 3),
        }
        if state is not None:
            entry.update({k: state.get(k) for k in ("state", "wchan", "syscall", "fd_target", "threads")})
        dump = results.get(pid)
        if dump is not None:
            entry["stack_tool"] = dump.tool
            entry["stack"] = dump.threads
            if dump.error:
                entry["stack_error"] = dump.error
        entries.append(entry)
    return {
        "asked_pid": target.asked_pid,
        "root_pid": target.root_pid,
        "notes": target.notes,
        "t_start": started,
        "t_end": ended,
        "interrupted": interrupted,
        "job_ended": all(states.get(p) is None for p in window.first_seen),
        "processes": entries,
        "stack_problem": problem,
        "rerun": _rerun_command(target),
    }
