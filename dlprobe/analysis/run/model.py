"""The run model: a saved run directory loaded into plain data (the Finding every analyzer returns is
evidence/finding.py's)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from dlprobe.analysis.run import secrets as run_secrets
from dlprobe.analysis.run.fault_records import FaultRecord, read_fault_records
from dlprobe.analysis.run.stackfile import StackProfile, load_stacks
from dlprobe.analysis.run.stderr_log import read_launcher_failures, stderr_not_kept, stderr_tail
from dlprobe.analysis.run.teardown import cut_teardown
from dlprobe.rundir import inflight_format
from dlprobe.rundir.files import ReadProblems, read_checked_json, read_checked_jsonl, run_subdir
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    CHECK_PROCESS_NAME,
    EV_BATCH_INFO,
    EV_BATCHES,
    EV_EPOCH,
    EV_EPOCH_END,
    EV_LAUNCHER_FAILURE,
    EV_LOADER,
    EV_LOADER_ERROR,
    EV_PROCESS,
    EV_SCRIPT_ERROR,
    EV_START,
    EV_START_METHOD,
    EV_WORKER_GC,
    EV_WORKER_START,
    EV_WORKERS_LAST,
    LAUNCH_COMMAND,
    SAMPLE_CPU,
    SAMPLE_FD_TARGETS,
    SAMPLE_FDS,
    SAMPLE_GONE,
    SAMPLE_PROC,
    SAMPLE_READ_AT,
    SAMPLE_READING,
    SAMPLE_RUN_DELAY,
    SAMPLE_THREAD,
    SAMPLE_UNREAD,
    STACKS_FILE,
    AttachRecord,
    HangRecord,
    KernelFile,
    Meta,
    Result,
    Sample,
    ScriptErrorEvent,
)
from dlprobe.rundir.validate import event_problem, field_checker, sample_problem

ROLE_CHECK = "dlprobe-check"  # a process dlprobe forked from the training for its own checks (docs/security.md)
# Memory by kind of page, as samples name it (system/procmem.KIND_FIELDS): Series has one list per kind.
PAGE_KINDS = ("anon", "private_dirty", "private_clean", "pss_anon", "pss_file", "pss_shmem")


@dataclass
class Series:
    """Memory (and CPU time) readings of one process over time; all but rss are None where only RSS was read, and
    the page kinds (anon ... pss_shmem, of smaps_rollup), cpu/runq and read_at in runs recorded before they were."""

    t: list[float] = field(default_factory=list)
    rss: list[int | None] = field(default_factory=list)
    uss: list[int | None] = field(default_factory=list)
    pss: list[int | None] = field(default_factory=list)
    swap: list[int | None] = field(default_factory=list)
    anon: list[int | None] = field(default_factory=list)
    private_dirty: list[int | None] = field(default_factory=list)
    private_clean: list[int | None] = field(default_factory=list)
    pss_anon: list[int | None] = field(default_factory=list)
    pss_file: list[int | None] = field(default_factory=list)
    pss_shmem: list[int | None] = field(default_factory=list)
    # Cumulative CPU seconds (utime+stime) and seconds waited for a core (schedstat), None where not read.
    cpu: list[float | None] = field(default_factory=list)
    runq: list[float | None] = field(default_factory=list)
    fds: list[int | None] = field(default_factory=list)  # open file descriptors, read every few ticks
    read_at: list[float | None] = field(default_factory=list)  # SAMPLE_READ_AT: its read ended this long after t

    def values(self, metric: str) -> list[tuple[float, int]]:
        """(time, value) pairs where the metric was read."""
        return [(t, v) for t, v in zip(self.t, getattr(self, metric), strict=False) if v is not None]


@dataclass
class ProcessRecord:
    pid: int
    role: str  # main | worker | other
    loader_id: int | None = None
    worker_id: int | None = None
    comm: str | None = None
    ppid: int | None = None
    series: Series = field(default_factory=Series)
    nofile: int | None = None  # its soft RLIMIT_NOFILE (None: unlimited, or not read)
    # What its descriptors pointed to the last time their count had climbed: (t, count, [(pattern, n), ...]).
    fd_targets: tuple[float, int, list[tuple[str, int]]] | None = None
    memory_unread: str | None = None  # why its smaps_rollup could not be read: its USS/PSS are unknown, not small
    # A worker's readings from its parent's death on are teardown, cut from `series` (run/teardown.py): when (the
    # parent's gone time), which parent, how many readings were left out. None: nothing was cut.
    teardown_from: float | None = None
    teardown_parent: int | None = None
    teardown_readings: int = 0
    # A worker process's full garbage collections, (start, stop) in wall-clock seconds (EV_WORKER_GC): the first one
    # copies what it inherited (in_training/worker_gc.py). Empty: none timed (or a run recorded before they were).
    full_collections: list[tuple[float, float]] = field(default_factory=list)
    # A probed process that began its own program (no fork of a probed parent: a torchrun rank, a spawn-started one)
    # shares no heap with its parent: summed with its parent's earlier readings (stats.job_pss_summable). False: fork.
    own_program: bool = False
    started: float | None = None  # when the process began (its /proc start time, wall clock); None: not read


# What smaps_rollup gives (RSS comes from the cheap statm reading too, and stays).
SMAPS_METRICS = ("uss", "pss", "swap", "anon", "private_dirty", "private_clean", "pss_anon", "pss_file", "pss_shmem")


@dataclass
class ThreadRecord:
    """A DataLoader worker that is a thread of `pid` (worker_method="thread"): only its CPU time is its own, so its
    series holds t, cpu and runq (memory is the process's)."""

    tid: int
    pid: int
    loader_id: int
    worker_id: int
    comm: str | None = None
    series: Series = field(default_factory=Series)


@dataclass
class Epoch:
    epoch: int
    t_start: float
    iter_s: float
    t_end: float | None = None
    batches: int = 0
    waits: list[float] = field(default_factory=list)
    t_last_batch: float | None = None
    # Batches each worker (by worker id) delivered to the loop so far this epoch; None where not recorded.
    worker_batches: list[int] | None = None
    worker_pids: list[int] = field(default_factory=list)  # the workers the epoch's event listed
    worker_tids: dict[int, int] = field(default_factory=dict)  # thread workers it started: native id -> worker id
    # Seconds the main process took to take each batch off the workers' result queue, alongside `waits`; None where
    # some batch of the epoch was not timed (no worker processes, a run recorded before dlprobe timed it).
    handovers: list[float] | None = field(default_factory=list)
    # A long run's waits are folded (in_training/wait_fold.py): then `waits` (and `handovers`) keep every
    # `wait_stride`-th batch's only, a uniform sample for medians and percentiles, and these the epoch's exact
    # totals: summed and longest wait, summed hand-over (None: not every batch timed). None where nothing was folded.
    wait_stride: int = 1
    wait_sum: float | None = None
    wait_max: float | None = None
    handover_sum: float | None = None

    @property
    def wait_s(self) -> float:
        """Seconds the loop waited for the epoch's batches, all of them (folded or not)."""
        return self.wait_sum if self.wait_sum is not None else sum(self.waits)

    @property
    def longest_wait_s(self) -> float:
        return self.wait_max if self.wait_max is not None else max(self.waits, default=0.0)

    @property
    def handover_s(self) -> float | None:
        """Seconds taking the epoch's batches off the result queue, all of them; None where not every one was timed."""
        if self.handover_sum is not None:
            return self.handover_sum
        return sum(self.handovers) if self.handovers is not None and len(self.handovers) == len(self.waits) else None


@dataclass
class LoaderRecord:
    loader_id: int
    config: dict[str, Any]
    t_created: float
    start_method: str | None = None
    epochs: list[Epoch] = field(default_factory=list)
    batch_info: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    # The parent's garbage collector when workers first started (enabled, frozen objects, pymalloc blocks).
    gc_at_fork: dict[str, Any] | None = None
    writer: int | None = None  # the pid of the process that built it (ranks of a job reuse loader ids)

    @property
    def dataset(self) -> dict[str, Any]:
        return self.config.get("dataset") or {}

    @property
    def thread_workers(self) -> bool:
        """Whether its workers were threads of the training process (torch's worker_method="thread"): no worker
        process, so nothing per worker process (memory, death, /dev/shm, fork) applies."""
        return self.start_method == "thread" or any(e.worker_tids for e in self.epochs)

    @property
    def settings_read(self) -> bool:
        """Whether the hooks read the loader's settings: when they failed (`inspect_error`) its config has none, and
        num_workers, persistent_workers, prefetch_factor, pin_memory are unknown, not 0, False or the defaults."""
        value = self.config.get("num_workers")
        return isinstance(value, int) and not isinstance(value, bool)

    @property
    def num_workers_setting(self) -> int | None:
        """num_workers as the script set it; None where it could not be read."""
        return int(self.config["num_workers"]) if self.settings_read else None

    @property
    def num_workers(self) -> int:
        """num_workers as set, or where the setting could not be read, the worker processes its epochs started (what
        was seen, for the memory and shm arithmetic; advice that changes the setting needs `settings_read`)."""
        setting = self.num_workers_setting
        if setting is not None:
            return setting
        return max((len(e.worker_pids) for e in self.epochs), default=0)

    @property
    def waits(self) -> list[float]:
        return [w for e in self.epochs for w in e.waits]


@dataclass
class SystemSeries:
    t: list[float] = field(default_factory=list)
    shm_used: list[int | None] = field(default_factory=list)
    shm_total: int | None = None
    available: list[int | None] = field(default_factory=list)
    cgroup_usage: list[int | None] = field(default_factory=list)
    cgroup_cache: list[int | None] = field(default_factory=list)  # of the usage, page cache (read with the USS)
    cgroup_limit: int | None = None
    cgroup_oom_kills: list[int | None] = field(default_factory=list)


WorkerStart = dict[int, tuple[int, int, float, dict[str, int] | None]]


@dataclass
class RunData:
    """Everything recorded about one run, as read back from its directory."""

    path: Path
    meta: Meta
    result: Result
    loaders: list[LoaderRecord]
    processes: list[ProcessRecord]
    system: SystemSeries
    events: list[dict[str, Any]]
    # Failure evidence: each process's last in-flight slot (by pid), hang records, when each pid vanished,
    # and the kernel's OOM-kill lines for our pids.
    inflight: dict[int, dict[str, Any]] = field(default_factory=dict)
    hangs: list[HangRecord] = field(default_factory=list)
    gone: dict[int, float] = field(default_factory=dict)
    kernel: dict[str, Any] = field(default_factory=dict)
    # Workers' own records of the fatal signal that ended them (faults/PID.txt), by pid.
    faults: dict[int, FaultRecord] = field(default_factory=dict)
    stacks: StackProfile | None = None  # py-spy samples of the main process and workers (stacks.txt)
    attach: AttachRecord | None = None  # `dlprobe attach`: the outside view (attach.json)
    # What load_run could not use, one {"file", "problem"} per file (a damaged or cut-short run directory).
    read_problems: list[dict[str, str]] = field(default_factory=list)
    # From stderr.log: its tail (the page shows it) and torchrun's failure summary (`rank-failed`); why there is no
    # tail where the script's stderr was not a file (a terminal, a pipe).
    stderr_tail: str | None = None
    stderr_not_kept: str | None = None
    launcher_failures: list[dict[str, Any]] = field(default_factory=list)
    threads: list[ThreadRecord] = field(default_factory=list)  # workers that are threads (worker_method="thread")
    # Each worker pid's (loader, worker id, start reading) as `loaders_from_events` found them with `loaders`: a view
    # of every event (job/model.py, one process) reuses both instead of folding the events again. None: not kept.
    worker_starts: WorkerStart | None = field(default=None, repr=False, compare=False)
    # measures/timed_batches.py's rows per (loader id, events seen): read once for the analyzers that share them
    timed_batches_cache: dict[tuple[int, int], list[Any]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def probe_started(self) -> bool:
        """Whether the target's probe wrote its start event (only `dlprobe run` targets, with a target pid, do)."""
        if self.meta.get("attached"):
            return True  # `dlprobe attach` runs no probe in the job: its events are its own
        script = str(self.meta.get("script") or "")
        # A command after `--` has no start event (its Python processes are probed at their first DataLoader, and it
        # may start none): there is no start event to miss.
        if not self.meta.get("target_pid") or script.startswith("<") or self.meta.get("launch") == LAUNCH_COMMAND:
            return True
        # A process probed through the environment (dlprobe run -- COMMAND) says who it is instead of "start".
        return any(e.get("ev") in (EV_START, EV_PROCESS) for e in self.events)

    @property
    def script_error(self) -> ScriptErrorEvent | None:
        error = next((e for e in self.events if e.get("ev") == EV_SCRIPT_ERROR), None)
        return cast(ScriptErrorEvent, error)

    @property
    def ended_in_error(self) -> bool:
        """The script ended with an exception, or a loader's error and a failing exit: its last seconds are a
        failure's, not a measure of how fast it loads (no throughput advice from them)."""
        if self.script_error is not None:
            return True
        failed = self.result.get("exit_code") not in (0, None) or self.result.get("signal") is not None
        return failed and any(lo.errors for lo in self.loaders)

    def workers(self, loader_id: int | None = None) -> list[ProcessRecord]:
        return [p for p in self.processes if p.role == "worker" and (loader_id is None or p.loader_id == loader_id)]

    def worker_threads(self, loader_id: int | None = None) -> list[ThreadRecord]:
        return [t for t in self.threads if loader_id is None or t.loader_id == loader_id]

    def loader(self, loader_id: int) -> LoaderRecord | None:
        return next((lo for lo in self.loaders if lo.loader_id == loader_id), None)


def loaders_from_events(events: list[dict[str, Any]]) -> tuple[list[LoaderRecord], WorkerStart]:
    """Loaders with their epochs and batch waits, and each worker pid's (loader, worker id, start reading).

    Loaders are keyed by (writer pid, loader id): every rank of a job numbers its loaders from 0. A worker's own
    events (its pid is not the writer's) belong to the loader of that id whose epoch listed the worker."""
    loaders: dict[tuple[int | None, int], LoaderRecord] = {}
    worker_of: WorkerStart = {}
    writer_of: dict[int, int | None] = {}  # worker pid -> the pid of the process that started it
    folds: dict[int, _Fold] = {}  # id(epoch) -> its batches' counts and sums as read
    for ev in events:
        kind = ev.get("ev")
        lid = ev.get("loader")
        pid = ev.get("pid")
        if kind == EV_LOADER and isinstance(lid, int):
            config = {k: v for k, v in ev.items() if k not in ("ev", "t", "pid", "loader")}
            loaders[(pid, lid)] = LoaderRecord(lid, config, ev["t"], writer=pid)
            continue
        if not isinstance(lid, int):
            continue
        lo = loaders.get((pid, lid))
        if lo is None and isinstance(pid, int) and pid in writer_of:
            lo = loaders.get((writer_of[pid], lid))
        if lo is None:  # one process built loaders: its workers' early events need no writer to find it
            same_id = [record for (_, i), record in loaders.items() if i == lid]
            lo = same_id[0] if len(same_id) == 1 else None
        if lo is None:
            continue
        if kind == EV_START_METHOD:
            lo.start_method = ev.get("start_method")
        elif kind == EV_EPOCH:
            lo.epochs.append(Epoch(ev["epoch"], ev["t"] - ev.get("iter_s", 0.0), ev.get("iter_s", 0.0)))
            if lo.gc_at_fork is None and ev.get("gc"):
                lo.gc_at_fork = ev["gc"]
            for th in ev.get("threads") or []:
                lo.epochs[-1].worker_tids[int(th["tid"])] = int(th["worker_id"])
            for w in ev.get("workers") or []:
                lo.epochs[-1].worker_pids.append(int(w["pid"]))
                worker_of[int(w["pid"])] = (lo.loader_id, int(w["worker_id"]), float(ev["t"]), w.get("memory"))
                writer_of[int(w["pid"])] = lo.writer
        elif kind == EV_BATCHES and lo.epochs:
            epoch = lo.epochs[-1]
            waits, handovers = ev.get("waits") or [], ev.get("handovers")
            chunk = folds.setdefault(id(epoch), _Fold(epoch))
            chunk.add(ev, len(epoch.waits), waits, handovers)
            epoch.waits.extend(waits)
            if epoch.handovers is not None:
                if isinstance(handovers, list) and len(handovers) == len(waits):  # every batch of the chunk timed
                    epoch.handovers.extend(handovers)  # in place: a new list per chunk made the load quadratic
                else:
                    epoch.handovers = None
            epoch.batches = chunk.batches
            epoch.t_last_batch = ev["t"]
            epoch.worker_batches = ev.get("worker_batches", epoch.worker_batches)
        elif kind == EV_EPOCH_END and lo.epochs:
            lo.epochs[-1].t_end = ev["t"]
            lo.epochs[-1].worker_batches = ev.get("worker_batches", lo.epochs[-1].worker_batches)
        elif kind == EV_BATCH_INFO and lo.batch_info is None:
            lo.batch_info = {k: ev.get(k) for k in ("bytes", "storage_bytes", "leaves")}
        elif kind == EV_LOADER_ERROR:
            lo.errors.append({k: v for k, v in ev.items() if k not in ("ev", "pid")})
    for lo in loaders.values():
        if lo.start_method is None:
            lo.start_method = lo.config.get("start_method")
        _unfold(lo, [folds[id(e)] for e in lo.epochs if id(e) in folds])
    return sorted(loaders.values(), key=lambda lo: (lo.loader_id, lo.t_created)), worker_of


class _Fold:
    """One epoch's batches as its `batches` events give them: exact counts and sums, and where in its kept waits each
    stride began (the writer's stride doubles as it keeps fewer)."""

    def __init__(self, epoch: Epoch) -> None:
        self.epoch = epoch
        self.batches = 0
        self.wait_s = 0.0
        self.wait_max = 0.0
        self.handover_s: float | None = 0.0
        self.strides: list[tuple[int, int]] = [(0, 1)]  # (position in the epoch's waits, the stride from there)
        self.folded = False

    def add(self, ev: dict[str, Any], at: int, waits: list[float], handovers: Any) -> None:
        n, stride = ev.get("n"), ev.get("stride")
        folded = isinstance(n, int) and isinstance(stride, int) and stride > 1 and n >= len(waits)
        if not folded:
            self.batches += len(waits)
            self.wait_s += sum(waits)
            self.wait_max = max(self.wait_max, *waits) if waits else self.wait_max
            timed = isinstance(handovers, list) and len(handovers) == len(waits)
            chunk_handover = sum(handovers) if timed else None
        else:
            self.folded = True
            self.batches += cast(int, n)
            self.wait_s += float(ev.get("wait_s") or sum(waits))
            self.wait_max = max(self.wait_max, float(ev.get("wait_max") or max(waits, default=0.0)))
            chunk_handover = ev.get("handover_s")
            if stride != self.strides[-1][1]:
                self.strides.append((at, cast(int, stride)))
        if self.handover_s is not None and isinstance(chunk_handover, (int, float)):
            self.handover_s += chunk_handover
        else:
            self.handover_s = None


def _unfold(loader: LoaderRecord, folds: list[_Fold]) -> None:
    """Each folded epoch's exact totals, and every epoch's kept waits thinned to the loader's largest stride: a
    uniform sample of its batches (each epoch's first wait kept), so percentiles weigh no part of the run more."""
    if not any(f.folded for f in folds):
        return
    stride = max(s for f in folds for _, s in f.strides)
    for fold in folds:
        epoch = fold.epoch
        epoch.wait_sum, epoch.wait_max, epoch.handover_sum = fold.wait_s, fold.wait_max, fold.handover_s
        ends = [at for at, _ in fold.strides[1:]] + [len(epoch.waits)]
        keep = [0] if epoch.waits else []
        for (start, kept_at), end in zip(fold.strides, ends, strict=True):
            keep.extend(range(max(start, 1), end, max(1, stride // kept_at)))
        timed = epoch.handovers is not None and len(epoch.handovers) == len(epoch.waits)
        epoch.waits = [epoch.waits[i] for i in keep]
        epoch.handovers = [epoch.handovers[i] for i in keep] if epoch.handovers is not None and timed else None
        epoch.wait_stride = stride


def _put(series: Series, at: int, t: float, values: dict[str, Any]) -> None:
    series.t.insert(at, t)
    for metric in ("rss", "uss", "pss", "swap", *PAGE_KINDS):
        getattr(series, metric).insert(at, values.get(metric))
    series.cpu.insert(at, values.get(SAMPLE_CPU))
    series.runq.insert(at, values.get(SAMPLE_RUN_DELAY))
    series.fds.insert(at, values.get(SAMPLE_FDS))
    series.read_at.insert(at, values.get(SAMPLE_READ_AT))


def _append(series: Series, t: float, values: dict[str, Any]) -> None:
    _put(series, len(series.t), t, values)


def _insert(series: Series, t: float, values: dict[str, Any]) -> None:
    """A reading taken inside the training process (the workers' last one of an epoch), put in time order."""
    _put(series, bisect.bisect_right(series.t, t), t, values)


def load_run(path: Path) -> RunData:
    """Read a run directory: what a damaged or cut-short one still holds. Every record is type-checked as it is
    read (rundir/validate.py); what could not be used is listed in `read_problems`, never raised."""
    problems, files = ReadProblems(), RunDir(path)
    meta = cast(Meta, read_checked_json(files.meta, field_checker(Meta), problems))
    meta = run_secrets.redact_meta(meta)  # a run recorded before redaction, or by another tool: not in the report
    # No result.json: the run is still going, or its supervisor was killed; that alone is no damage.
    result = cast(Result, read_checked_json(files.result, field_checker(Result), problems, required=False))
    events = read_checked_jsonl(files.events, event_problem, problems)
    run_secrets.redact_events(events)
    samples = read_checked_jsonl(files.samples, sample_problem, problems)
    loaders, worker_of = loaders_from_events(events)
    # Each worker's own reading as it started (EV_WORKER_START), before the user's worker_init_fn.
    own_start = {int(ev["pid"]): (float(ev["t"]), ev["memory"]) for ev in events
                 if ev.get("ev") == EV_WORKER_START and ev.get("memory")}  # fmt: skip
    main_pid = meta.get("target_pid")
    processes: dict[int, ProcessRecord] = {}
    threads: dict[int, ThreadRecord] = {}
    thread_of = {tid: (lo.loader_id, wid) for lo in loaders for e in lo.epochs for tid, wid in e.worker_tids.items()}
    system = SystemSeries()
    gone: dict[int, float] = {}
    unread: dict[int, str] = {}
    for line in samples:
        rec = cast(Sample, line)
        kind = rec.get("k")
        if kind == SAMPLE_PROC:
            pid = int(rec["pid"])
            # dlprobe's own copies (the readiness copy, the sample check): named as such, not "other" of the job
            role = "main" if pid == main_pid else ROLE_CHECK if rec.get("comm") == CHECK_PROCESS_NAME else "other"
            loader_id = worker_id = None
            first: dict[str, int] | None = None
            if pid in worker_of:
                role = "worker"
                loader_id, worker_id, t_start, first = worker_of[pid]
            proc = ProcessRecord(pid, role, loader_id, worker_id, rec.get("comm"), rec.get("ppid"))
            proc.nofile = rec.get("nofile")
            started = rec.get("start")
            if isinstance(started, int | float) and not isinstance(started, bool):
                proc.started = float(started)
            own = own_start.get(pid)
            if own is not None:  # the worker's own reading, before the user's worker_init_fn ran
                _append(proc.series, *own)
            if first:  # the reading the hooks took right after the worker started
                _insert(proc.series, t_start, first)
            processes[pid] = proc
        elif kind == SAMPLE_THREAD:
            tid = int(rec["tid"])
            if tid in thread_of:
                threads[tid] = ThreadRecord(tid, int(rec["pid"]), *thread_of[tid], comm=rec.get("comm"))
        elif kind == SAMPLE_READING:
            t = rec["t"]
            for pid_text, vals in (rec.get("p") or {}).items():
                known = processes.get(int(pid_text)) if pid_text.isdigit() else None
                if known is not None:
                    _append(known.series, t, vals)
            for tid_text, vals in (rec.get("th") or {}).items():
                thread = threads.get(int(tid_text)) if tid_text.isdigit() else None
                if thread is not None:
                    _append(thread.series, t, vals)
            system.t.append(t)
            shm = rec.get("shm") or {}
            system.shm_used.append(shm.get("used"))
            system.shm_total = shm.get("total", system.shm_total)
            system.available.append(rec.get("avail"))
            cg = rec.get("cg") or {}
            system.cgroup_usage.append(cg.get("usage"))
            system.cgroup_cache.append(cg.get("cache"))
            system.cgroup_oom_kills.append(cg.get("oom_kill"))
            if cg.get("limit"):
                system.cgroup_limit = cg["limit"]
        elif kind == SAMPLE_GONE:
            gone[int(rec["pid"])] = rec["t"]
        elif kind == SAMPLE_FD_TARGETS and int(rec["pid"]) in processes:
            top = [
                (str(p[0]), p[1]) for p in rec["top"] if isinstance(p, list) and len(p) == 2 and isinstance(p[1], int)
            ]
            processes[int(rec["pid"])].fd_targets = (float(rec["t"]), int(rec["n"]), top)
            nofile = rec.get("nofile")
            if isinstance(nofile, int) and not isinstance(nofile, bool):  # read again as the count climbed: a
                processes[int(rec["pid"])].nofile = nofile  # worker_init_fn may have lowered it after the fork
        elif kind == SAMPLE_UNREAD:
            unread.setdefault(int(rec["pid"]), str(rec["error"]))
    for ev in events:
        if ev.get("ev") == EV_PROCESS and ev.get("forked") is False and (probed := processes.get(int(ev["pid"]))):
            probed.own_program = True
        if ev.get("ev") == EV_WORKER_GC and (timed := processes.get(int(ev["pid"]))) is not None:
            timed.full_collections.extend(
                (float(c[0]), float(c[1])) for c in ev["collections"] if isinstance(c, list) and len(c) == 2
            )
        if ev.get("ev") == EV_WORKERS_LAST:
            for w in ev.get("workers") or []:
                served = processes.get(int(w.get("pid") or 0))
                if served is not None and w.get("memory"):
                    _insert(served.series, float(ev["t"]), w["memory"])
    for pid, why in unread.items():
        # Its memory was refused from some point on: what was read of it (its own start-up reading above all) would
        # read as its peak. Unknown is said as unknown (the table's "not read", a probe-degraded finding).
        unread_proc = processes.get(pid)
        if unread_proc is not None:
            unread_proc.memory_unread = why
            for metric in SMAPS_METRICS:
                setattr(unread_proc.series, metric, [None] * len(unread_proc.series.t))
    stacks = load_stacks(path)
    if stacks is not None and stacks.read_problem:
        problems.add(STACKS_FILE, stacks.read_problem)
    run = RunData(path, meta, result, loaders, list(processes.values()), system, events, gone=gone, stacks=stacks)
    run.worker_starts = worker_of
    run.threads = list(threads.values())
    cut_teardown(run)  # the one place a worker's readings after its parent died leave its series
    load_failure_records(run, problems)
    run.read_problems = problems.lines()
    return run


def _hang_number(path: Path) -> int:
    tail = path.stem.rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0


def load_failure_records(run: RunData, problems: ReadProblems | None = None) -> None:
    """In-flight slots, hang records, kernel OOM lines, stderr.log's tail and torchrun's summary, where the run has
    them; what could not be read of them goes to `problems` (a kernel.json unreadable turns an OOM kill into an
    unexplained one: the report says so)."""
    problems = problems if problems is not None else ReadProblems()
    files = RunDir(run.path)
    run.inflight = inflight_format.read_all(run.path) if run_subdir(files.inflight_dir, problems) else {}
    hangs = run_subdir(files.hangs_dir, problems)
    for hang_file in sorted(RunDir.hang_records_in(hangs) if hangs else [], key=_hang_number):
        record = read_checked_json(hang_file, field_checker(HangRecord), problems)
        if record:
            run.hangs.append(cast(HangRecord, record))
    run.kernel = read_checked_json(files.kernel, field_checker(KernelFile), problems, required=False)
    run.faults = read_fault_records(run.path, problems)
    run.attach = run_secrets.redact_attach(
        cast(
            AttachRecord | None,
            read_checked_json(files.attach, field_checker(AttachRecord), problems, required=False),
        )
    )
    run.stderr_tail = run_secrets.redact_log_text(stderr_tail(run.path, problems))
    run.stderr_not_kept = stderr_not_kept(run.result.get("stderr"))
    summary = next((e.get("summary") for e in reversed(run.events) if e.get("ev") == EV_LAUNCHER_FAILURE), None)
    run.launcher_failures = read_launcher_failures(run.path, run_secrets.redact_log_text(summary))
