"""The shapes of events.jsonl's lines about how a loader's workers start: the state forked into them, what the
other start methods would make of the loader, the handles the dataset holds, the start-up profile and the
accelerator. Imported through rundir/schema.py."""

# No `from __future__ import annotations` (as in schema.py): string annotations compiled into ForwardRefs
# would triple the import's CPU time in every process that imports the schema.
from typing import Any, TypedDict

from dlprobe.rundir.events import Event


class ForkThread(TypedDict, total=False):
    name: str
    daemon: bool
    state: str  # running | waiting | uses-lock | unknown
    frame: str


class ForkBaseline(TypedDict, total=False):
    os_threads: int
    python_threads: int


class ForkStateEvent(Event, total=False):
    """EV_FORK_STATE: threads, OpenMP and CUDA just before a loader forks its workers (in_training/runtime_state)."""

    loader: int
    epoch: int
    os_threads: int
    os_thread_names: dict[str, int]
    python_threads: list[ForkThread]
    baseline: ForkBaseline | None
    torch_threads: int
    openmp: bool
    cuda_initialized: bool | None


class ForkHandle(TypedDict, total=False):
    fd: int
    target: str  # the file's path, or socket:[inode]
    kind: str  # file | socket
    pos: int  # the offset every worker shares
    access: str  # r | w | rw
    attribute: str  # the path from the dataset to the object holding it: self.h5, self.dataset.env
    owner: str  # the object's module and class: h5py._hl.files.File, lmdb.Environment
    held_by: str  # how the object was tied to it: fileno | name | path (a path the dataset names, no fileno)
    via: str  # a socket found deep under `attribute` (a session's pooled connection): the path to it
    via_owner: str  # the class of the object that holds it there: ssl.SSLSocket, socket.socket


class ForkMapping(TypedDict, total=False):
    path: str  # a data file (not a library) mapped into the parent as the workers fork
    kib: int  # mapped, all its mappings together
    shared: bool  # MAP_SHARED somewhere (writes reach the file and every worker)
    writable: bool
    attribute: str  # the object holding it, where one names the file (np.memmap's filename, an Arrow table's path)
    owner: str


class PickleCheck(TypedDict, total=False):
    """One object torch hands each worker under forkserver and spawn, pickled into a counting sink."""

    name: str  # dataset | collate_fn | worker_init_fn
    picklable: bool | None  # None: not known (the check stopped at its bound: `skipped` says which)
    pickled_bytes: int | None
    skipped: str
    pickled_at_least: int  # where skipped: the bytes counted before the bound
    attribute: str  # where it fails: self.transform, self.env
    kind: str  # lambda | local-function | local-class | handle | lock | thread | other
    reason: str
    error: str
    tensors: int
    tensor_bytes: int
    buffer_bytes: int  # large arrays counted by their length, not pickled by the check
    not_run: list[str]  # classes of the user's own code whose __reduce__/__getstate__ the probe did not call


class MainScript(TypedDict, total=False):
    """`__main__` as a forkserver or spawn worker would run it again."""

    file: str | None
    guarded: bool | None  # the loader is iterated inside `if __name__ == "__main__":`; None: not known
    iter_line: int | None
    guard_lines: list[list[int]]
    top_level_imports_s: float  # the top level's imports outside the guard (every such worker repeats them)
    top_level_work_s: float  # the top level's other work outside the guard
    guarded_s: float
    imports_s: float  # every import before the loader (a worker imports what its objects need again)
    guarded_cpu_s: float  # the main thread's CPU inside the guard (a worker does not run it)
    redo_cpu_s: float  # the main thread's CPU until the loop, less guarded_cpu_s: what a spawn worker runs again


class ForkserverState(TypedDict, total=False):
    """What a fork server would have ready for the loader's workers (in_training/start_readiness.forkserver_state)."""

    running: bool  # already started by this process: no server start to wait for
    preload: list[str]  # the modules it imports once (multiprocessing.set_forkserver_preload)
    preloads_main: bool  # `__main__` among them and really imported there (CPython 3.14, 3.13.8: gh-126631)


class StartReadinessSkippedEvent(Event, total=False):
    """EV_START_READINESS_SKIPPED: a loader's readiness was not checked, and why (in_training/quiet_fork.py)."""

    loader: int
    reason: str


class StartReadinessEvent(Event, total=False):
    """EV_START_READINESS: a loader's objects and script as forkserver and spawn would hand them to each worker."""

    loader: int
    start_method: str
    chosen: bool  # the script (or the loader) chose the method; False: the interpreter's default
    num_workers: int
    persistent_workers: bool
    objects: list[PickleCheck]
    picklable: bool | None
    pickled_bytes: int | None
    pickle_s: float
    pickle_cpu_s: float  # the check's CPU for the in-band pickle (the parent pickles each worker's copy again)
    buffer_bytes: int  # large arrays counted by length (the parent copies them into each worker's pickle)
    copy_bytes: int  # the memory a worker's unpickled copy takes (estimated)
    copy_truncated: bool
    size_s: float
    tensors: int
    tensor_bytes: int
    cpus: int
    cpu_share: float | None  # of its runnable time so far, the share the process ran (the rest: waiting for a core)
    load: float  # the 1-minute load average then
    main: MainScript
    forkserver: ForkserverState
    share_now: float  # the share of a core a CPU-bound process got over the main thread's last seconds and the check
    share_now_runnable_s: float  # the runnable time share_now was read over


class ForkHandlesEvent(Event, total=False):
    """EV_FORK_HANDLES: the files and sockets objects of the dataset hold as a loader forks its workers."""

    loader: int
    epoch: int
    fds: int | None
    handles: list[ForkHandle]
    mapped: list[ForkMapping]
    pools: list[dict[str, Any]]  # attribute, owner, threads (names), count: live threads the dataset's objects hold


class ProfileStack(TypedDict, total=False):
    phase: str  # before_loader | ...
    seconds: float
    frames: list[list[Any]]  # [file, function, line], outermost first


class StartupProfileEvent(Event, total=False):
    """EV_STARTUP_PROFILE: where the script's time went before its first batch (in_training/startup_profile.py)."""

    reason: str
    started: float
    stopped: float
    loader_created: float
    samples: int
    sampled_s: float
    truncated_s: float
    stacks: list[ProfileStack]


class AccelEvent(Event, total=False):
    loader: int
    pin_effective: bool | None
    cuda_initialized: bool | None
