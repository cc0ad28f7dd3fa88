"""Which processes of a running job `dlprobe attach PID` watches, and what each one is, from /proc alone.

A training process is a Python process of the tree that is not a DataLoader worker and has no training process
below it; a process above training processes (torchrun's agent, a shell, accelerate) is a launcher. A worker is a
process torch named `pt_data_worker`, a spawned child (`multiprocessing.spawn`), or a forked child with its
parent's command line; it belongs to the nearest training process above it.

Only PID's own tree is read: its descendants, found through /proc/PID/task/TID/children (and PID's parent when PID
is a worker). PID 1 and kernel threads are refused: their tree is the whole machine, other users' jobs included.
Command lines are kept redacted (dlprobe/redact.py) from the moment they are read; environments only for their
rank variables, and only where the kernel lets this user read them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import psutil

from dlprobe.errors import DlprobeError
from dlprobe.redact import redact_argv
from dlprobe.system import procinfo, procmem
from dlprobe.system.proctree import descendant_pids

ROLE_MAIN = "main"
ROLE_WORKER = "worker"
ROLE_LAUNCHER = "launcher"
ROLE_OTHER = "other"
# Python helper processes of multiprocessing that are neither workers nor training processes.
HELPER_MARKERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "from multiprocessing.forkserver")
FIND_HINT = "give the pid of the training process or its launcher (`ps -ef --forest`, `pgrep -af python`)"
# PID 1 (init) and the kernel's threads (children of kthreadd, pid 2) are above every job on the machine.
INIT_PID = 1
KTHREADD_PID = 2


@dataclass
class Proc:
    pid: int
    ppid: int | None
    comm: str | None
    cmdline: list[str]
    python: bool
    started: float | None
    role: str = ROLE_OTHER
    main_pid: int | None = None  # a worker's training process
    env: dict[str, str] | None = None  # RANK, LOCAL_RANK, ... (None: /proc/PID/environ not readable)
    uid: int | None = None  # the process's owner (None: gone before it was read)

    def to_dict(self) -> dict[str, Any]:
        rank = _int((self.env or {}).get("RANK"))
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "comm": self.comm,
            "cmdline": self.cmdline,
            "role": self.role,
            "main_pid": self.main_pid,
            "rank": rank,
            "local_rank": _int((self.env or {}).get("LOCAL_RANK")),
            "world_size": _int((self.env or {}).get("WORLD_SIZE")),
            "env_readable": self.env is not None,
            "uid": self.uid,
            "started": self.started,
        }


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_proc(pid: int) -> Proc | None:
    if not procinfo.exists(pid):
        return None
    cmdline = procinfo.read_cmdline(pid)
    try:
        started: float | None = psutil.Process(pid).create_time()
    except psutil.Error:
        started = None
    python = procinfo.is_python(pid, cmdline)
    # redacted once, here: attach.json, the events, meta.json and every message read this copy (workers still
    # compare equal to the parent they were forked from: the same words redact the same way)
    proc = Proc(pid, procinfo.read_ppid(pid), procmem.read_comm(pid), redact_argv(cmdline), python, started)
    proc.uid = procinfo.owner(pid)
    return proc


def _is_helper(proc: Proc) -> bool:
    text = " ".join(proc.cmdline)
    return any(marker in text for marker in HELPER_MARKERS)


def _looks_like_worker(proc: Proc, parent: Proc | None) -> bool:
    if proc.comm == procinfo.TORCH_WORKER_COMM:
        return True
    if not proc.python or _is_helper(proc):
        return False
    text = " ".join(proc.cmdline)
    if "multiprocessing.spawn" in text or "--multiprocessing-fork" in text:
        return True  # spawned (or forkserver-started) multiprocessing child
    return parent is not None and parent.python and proc.cmdline == parent.cmdline  # forked: same command line


def is_worker(pid: int) -> bool:
    proc = read_proc(pid)
    if proc is None:
        return False
    return _looks_like_worker(proc, read_proc(proc.ppid) if proc.ppid else None)


def classify(procs: dict[int, Proc]) -> None:
    """Set each process's role (and a worker's main_pid) from the tree's parent links."""
    for proc in procs.values():
        proc.role = ROLE_WORKER if _looks_like_worker(proc, procs.get(proc.ppid or -1)) else ROLE_OTHER
    # a worker's worker (a nested pool) is still work for the same training process: find the nearest non-worker
    for proc in procs.values():
        if proc.role != ROLE_WORKER:
            continue
        up = procs.get(proc.ppid or -1)
        while up is not None and (up.role == ROLE_WORKER or _is_helper(up)):
            up = procs.get(up.ppid or -1)
        proc.main_pid = up.pid if up is not None else proc.ppid
    candidates = [p for p in procs.values() if p.role != ROLE_WORKER and p.python and not _is_helper(p)]
    mains_of_workers = {p.main_pid for p in procs.values() if p.role == ROLE_WORKER}
    for proc in candidates:
        below = _descendants(procs, proc.pid)
        if proc.pid in mains_of_workers or not any(p in candidates for p in below):
            proc.role = ROLE_MAIN
    for proc in procs.values():
        if proc.role == ROLE_OTHER and any(p.role == ROLE_MAIN for p in _descendants(procs, proc.pid)):
            proc.role = ROLE_LAUNCHER


def _descendants(procs: dict[int, Proc], pid: int) -> list[Proc]:
    out: list[Proc] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        children = [p for p in procs.values() if p.ppid == parent and p.pid != parent]
        out.extend(children)
        stack.extend(c.pid for c in children)
    return out


def tree_pids(root: int) -> list[int]:
    """The root and its descendants, less dlprobe itself and what it started (py-spy): attaching to the shell that
    runs both the job and `dlprobe attach` must not watch the watcher."""
    pids = descendant_pids(root)
    if pids is None:  # a kernel without /proc/PID/task/TID/children: psutil reads every process's parent pid, only
        try:
            pids = [child.pid for child in psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            pids = []
    own = {os.getpid(), *(descendant_pids(os.getpid()) or [])}
    return [p for p in [root, *pids] if p not in own]


@dataclass
class Target:
    """What PID turned out to be, and the tree attach watches."""

    asked_pid: int
    root_pid: int
    procs: dict[int, Proc]
    notes: list[str] = field(default_factory=list)

    def mains(self) -> list[Proc]:
        return sorted((p for p in self.procs.values() if p.role == ROLE_MAIN), key=_rank_order)

    def workers(self, main_pid: int | None = None) -> list[Proc]:
        found = [p for p in self.procs.values() if p.role == ROLE_WORKER]
        if main_pid is not None:
            found = [p for p in found if p.main_pid == main_pid]
        return sorted(found, key=lambda p: (p.started or 0.0, p.pid))

    def refresh(self) -> list[Proc]:
        """Add processes that appeared in the tree since (new workers each epoch); returns the new ones."""
        new = []
        for pid in tree_pids(self.root_pid):
            if pid not in self.procs:
                proc = read_proc(pid)
                if proc is not None:
                    self.procs[pid] = proc
                    new.append(proc)
        if new:
            classify(self.procs)
            for proc in new:
                if proc.role == ROLE_MAIN:
                    proc.env = procinfo.read_environ(proc.pid)
            self.notes.extend(other_users([p for p in new if p.role != ROLE_WORKER]))
        return new


def _rank_order(proc: Proc) -> tuple[int, int]:
    rank = _int((proc.env or {}).get("RANK"))
    return (rank if rank is not None else 1 << 30, proc.pid)


def other_users(procs: list[Proc]) -> list[str]:
    """One note per process of the tree that another user runs: it is watched as part of the tree (the user asked
    for this tree), and what the kernel would not let us read of it is said, not guessed."""
    me = os.geteuid()
    notes = []
    for proc in procs:
        if proc.uid is None or proc.uid == me:
            continue
        unread = (
            "; its environment may not be read by this user, so its rank is not known"
            if proc.role == ROLE_MAIN and proc.env is None
            else ""
        )
        who = f"pid {proc.pid} ({proc.comm or '?'})"
        notes.append(f"{who} in the tree belongs to another user (uid {proc.uid}){unread}")
    return notes


def refuse_machine_wide(pid: int, what: str = "") -> None:
    """PID 1 and kernel threads: their tree is every process on the machine, other users' jobs included."""
    if pid == INIT_PID:
        raise DlprobeError(
            f"pid 1{what} is the system's init process: its tree is every process on the machine",
            hint=FIND_HINT + "; where the training script itself is pid 1 (a container), run it under `dlprobe run`",
        )
    if pid == KTHREADD_PID or procinfo.read_ppid(pid) == KTHREADD_PID or procinfo.is_kernel_thread(pid):
        raise DlprobeError(f"pid {pid}{what} is a kernel thread, not a training job", hint=FIND_HINT)


def _not_readable(pid: int, name: str, proc: Proc, why: str) -> DlprobeError:
    """Whether torch is loaded cannot be read: a permission problem, said as one (never "no torch")."""
    owner = f"belongs to uid {proc.uid}" if proc.uid is not None and proc.uid != os.geteuid() else "is not readable"
    return DlprobeError(
        f"pid {pid} ({name}): pid {proc.pid} {owner}, and this user (uid {os.geteuid()}) may not read its memory "
        f"maps ({why})",
        hint=f"run `dlprobe attach {pid}` as the user who runs the job, or as root",
    )


def resolve(pid: int) -> Target:
    """The tree to watch for PID, or a DlprobeError (exit 2) saying why there is none."""
    refuse_machine_wide(pid)
    asked = read_proc(pid)
    if asked is None:
        raise DlprobeError(f"no process with pid {pid}", hint=FIND_HINT)
    notes = []
    root = asked
    if asked.ppid and is_worker(pid):
        parent = read_proc(asked.ppid)
        if parent is not None:
            refuse_machine_wide(parent.pid, f" (the parent of worker {pid})")
            notes.append(
                f"pid {pid} is a DataLoader worker; attached to its training process, pid {parent.pid}, "
                "and all its workers"
            )
            root = parent
    procs = {}
    for p in tree_pids(root.pid):
        proc = read_proc(p)
        if proc is not None:
            procs[p] = proc
    classify(procs)
    target = Target(pid, root.pid, procs, notes)
    mains = target.mains()
    name = " ".join(asked.cmdline)[:120] or asked.comm or "?"
    if not mains:
        raise DlprobeError(
            f"pid {pid} ({name}) is not a Python process and has no Python process below it",
            hint=FIND_HINT,
        )
    seen = {p.pid: procinfo.torch_mapped(p.pid) for p in mains}
    refused = [p for p in mains if seen[p.pid][1] is not None]
    if not any(found for found, _ in seen.values()) and refused:
        raise _not_readable(pid, name, refused[0], seen[refused[0].pid][1] or "")
    if not any(found for found, _ in seen.values()):
        raise DlprobeError(
            f"pid {pid} ({name}) has no process that has loaded torch",
            hint=FIND_HINT + "; attach once the script has imported torch",
        )
    for proc in mains:
        proc.env = procinfo.read_environ(proc.pid)
    notes.extend(other_users([p for p in procs.values() if p.role != ROLE_WORKER]))
    top = procs.get(root.pid)  # as classified in the tree (`root` was read before the tree was)
    if top is not None and top.role == ROLE_MAIN and top.ppid:
        env = top.env or {}
        # the launcher is outside the tree: named by its pid only, nothing of it is read
        if procinfo.exists(top.ppid) and "RANK" in env and "WORLD_SIZE" in env and env.get("WORLD_SIZE") != "1":
            notes.append(
                f"pid {top.pid} is rank {env['RANK']} of {env['WORLD_SIZE']}; to cover every rank attach to its "
                f"launcher: dlprobe attach {top.ppid}"
            )
    return target
