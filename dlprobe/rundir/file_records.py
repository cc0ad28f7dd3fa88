"""The shapes of the run directory's other records: samples.jsonl's lines, hang records, kernel.json,
stacks.json, meta.json, result.json and attach.json. Imported through rundir/schema.py."""

# No `from __future__ import annotations` (as in schema.py): string annotations compiled into ForwardRefs
# would triple the import's CPU time in every process that imports the schema.
from typing import Any, TypedDict


class CgroupReading(TypedDict, total=False):
    """samples.jsonl "cg": the run's memory cgroup (system/cgroup.memory_state)."""

    usage: int | None
    limit: int | None  # the tightest limit on the way to the root; None when unlimited everywhere
    limit_dir: str | None  # the cgroup whose limit that is
    oom_kill: int | None
    # Of usage, page cache the kernel drops before it kills (system/cgroup.reclaimable_cache): read under a limit, with
    # the processes' USS (a full round), so the cgroup's charge beyond their private memory can be measured.
    cache: int | None


class Sample(TypedDict, total=False):
    """One line of samples.jsonl; "k" says which: proc (a new process), s (a reading), gone (a process ended)."""

    k: str
    t: float
    pid: int
    ppid: int | None
    comm: str | None
    p: dict[str, dict[str, int | float | None]]  # pid (as text) -> rss/uss/pss/swap, SAMPLE_CPU, SAMPLE_RUN_DELAY
    # worker threads: tid (as text) -> SAMPLE_CPU, SAMPLE_RUN_DELAY from /proc/PID/task/TID (no memory of their own)
    th: dict[str, dict[str, float | None]]
    tid: int
    shm: dict[str, int]
    avail: int | None
    cg: CgroupReading
    nofile: int | None  # proc: its soft RLIMIT_NOFILE (None: unlimited or not read)
    start: float | None  # proc: when the process began (its /proc start time, wall clock); None: not read
    n: int  # fdt: the descriptors open when their targets were read
    top: list[list[Any]]  # fdt: [target pattern, count], most first (system/procfds.target_pattern)
    error: str  # unread: why the process's smaps_rollup could not be read


class HangRecord(TypedDict, total=False):
    """hangs/hang-N.json: what the supervisor saw when the loop had waited past --hang-timeout."""

    number: int
    t: float
    waited_s: float
    loop: dict[str, Any]
    main_pid: int
    processes: list[dict[str, Any]]
    stack_problem: dict[str, Any] | None
    on_hang: str
    timeout_s: float


class KernelFile(TypedDict, total=False):
    """kernel.json: the kernel's OOM-kill records naming the run's processes (system/kernlog.oom_kills)."""

    readable: bool
    kills: list[dict[str, Any]]  # pid, line, ...


class StacksMeta(TypedDict, total=False):
    """stacks.json: the hotspot sampler's settings and outcome; `error` is why it recorded nothing (py-spy's own
    message when py-spy failed)."""

    rate: int
    window_s: float
    status: str  # SAMPLER_*
    error: str | None
    burst_s: int  # seconds of each burst on one process; absent in runs that sampled the whole tree at once
    sampled_pids: list[int]  # the process of each burst that left stacks, in order
    cpu_s: float  # py-spy's own CPU time (user + system) over all bursts: what the sampling cost the machine
    fetch_samples: int  # samples inside the workers' fetch path: the window ends once they rank (ranked_enough)


class Machine(TypedDict, total=False):
    """meta.json "machine": facts of the machine the run was recorded on (supervisor/run_options.machine_facts)."""

    host: str
    platform: str
    python: str
    cpu_count: int | None
    cpu_affinity: int
    cpu_quota: float | None  # the cgroup's CPU quota in cores
    usable_cores: int
    mem_total: int
    mem_available: int
    shm_total: int | None
    load_avg_1m: float | None  # the 1-minute load average as the run started (None: not readable)


class PromMeta(TypedDict, total=False):
    """meta.json "prometheus": where the run's live exposition was (`--prom-textfile`, `--prom-listen`)."""

    job: str  # the `job` label of every series
    textfile: str  # the file in node_exporter's textfile directory (removed at the end of the run)
    listen: str  # HOST:PORT serving /metrics (the port the system chose, for --prom-listen 0)


class LiveWorker(TypedDict, total=False):
    """live_summary.json: one DataLoader worker process running now, as the sampler last read it (bytes)."""

    worker: int  # its worker id in its loader
    pid: int
    uss: int | None
    pss: int | None
    pss_anon: int | None  # PSS by kind of page (smaps_rollup, Linux 5.3+)
    pss_file: int | None
    pss_shmem: int | None
    rss: int | None
    fds: int | None  # open descriptors


class LiveLoader(TypedDict, total=False):
    """live_summary.json: one loader of a training process (its most recent loaders only)."""

    loader: int  # the loader id its events carry
    batches: int  # batches the loop has taken from it so far
    data_wait_s: float  # seconds the loop has waited for its batches so far
    # of the last LIVE_WAIT_WINDOW_S of the loop's batches (its batches events' clock), the share spent waiting for
    # data; None until two batches events span some time
    data_wait_share: float | None
    workers: list[LiveWorker]  # its workers running now (one that has exited is dropped)


class LiveProcess(TypedDict, total=False):
    """live_summary.json: one training process (the target, or each rank that built a DataLoader)."""

    pid: int
    rank: int | None
    uss: int | None
    pss: int | None
    rss: int | None
    loaders: list[LiveLoader]


class LiveSummary(TypedDict, total=False):
    """live_summary.json (`dlprobe run --log-to`): the supervisor's latest readings, written whole at each refresh
    (supervisor/live_summary.py); each training process logs its own entry (in_training/sinks.py)."""

    t: float  # the supervisor's time.time() at the refresh
    shm_used: int | None  # /dev/shm bytes used (the whole tmpfs)
    shm_total: int | None
    processes: list[LiveProcess]  # the training processes running now


class Meta(TypedDict, total=False):
    schema_version: int
    dlprobe_version: str
    script: str  # the script, the module (-m) or the command's first word
    argv: list[str]
    launch: str  # LAUNCH_*: how the target was started (absent in runs before launchers: a script)
    command: list[str]  # the full command line that was started, as the user gave it
    node_rank: int | None  # this node's rank in a several-node job (from the command's --node-rank), else None
    cwd: str
    started_at: float
    machine: Machine
    target_pid: int
    cgroup: str | None
    cgroup_limit_dir: str | None  # the cgroup on the path to the root whose memory limit is the tightest
    in_process: bool
    attached: bool  # `dlprobe attach`: the job was already running; no hooks, only what /proc and py-spy show
    attached_pid: int  # the pid given to `dlprobe attach` (target_pid is the root of the tree it watched)
    start_method_forced: str  # `dlprobe run --start-method M`: every loader's workers were asked to start with M
    own_options_after_script: list[str]  # `dlprobe run s.py --verbose`: options of dlprobe's the script got
    isolated_checks: bool  # False: `--no-isolated-checks` (no copy of the training forked for dlprobe's checks)
    prometheus: PromMeta  # `--prom-textfile` / `--prom-listen`: where the live metrics were exposed
    log_to: list[str]  # `--log-to`: the libraries the summary was logged into (the script's own runs only)


class SupervisorCost(TypedDict, total=False):
    """result.json "supervisor": what probing cost, and whether the supervisor's own CPU cap cut its reads."""

    cpu_s: float  # its CPU seconds, start-up included
    max_rss_bytes: int
    cpu_budget: float  # the cap, as a share of one core (supervisor/budget.py)
    cpu_share: float  # its share of one core while the target ran
    wall_s: float  # the seconds that share is over
    cpu_window_s: float  # the cap holds over any window this long; a shorter run may show more (its start-up)
    over_budget_s: float  # seconds it ran over the cap and skipped smaps_rollup reads of moving processes
    deep_reads_skipped: int  # such skipped reads (every process was still read at least every 5 s)


# torch's workers check on their main process every MP_STATUS_CHECK_INTERVAL (5 s) and exit once it is gone; the
# supervisor records workers that outlive the job this long, then names those left running (result.json "orphans_left").
ORPHAN_GRACE_S = 6.0


class ShmRemoved(TypedDict):
    """result.json "shm_removed": a torch_<pid>_* file a dead process of the job left in /dev/shm, removed."""

    name: str
    bytes: int


class SupervisorProblem(TypedDict):
    """result.json "problems": a part of the supervisor that failed, and what the report lacks because of it."""

    where: str
    type: str
    message: str
    consequence: str
    count: int


class StderrKept(TypedDict, total=False):
    """Where the script's stderr went, and what stderr.log holds of it: dlprobe is never between the script and its
    stderr, so only a regular file (a Slurm or CI log) can be read back after the run."""

    kind: str  # "file", "terminal", "pipe", "socket", "closed", "other"
    written_bytes: int | None  # what the run wrote to the file (kind "file")
    kept_bytes: int  # what stderr.log holds: all of it, or its head and its end, at most STDERR_KEPT_BYTES
    problem: str | None  # why a file could not be read back


class Result(TypedDict, total=False):
    returncode: int
    exit_code: int
    signal: str | None
    ended_at: float
    supervisor: SupervisorCost
    hangs: int
    stopped_by: str  # for people
    stop_reason: str  # for programs: STOP_REASON_HANG
    survivors: list[int]
    shm_removed: list[ShmRemoved]  # system/shm_files.py; absent when nothing was left
    orphans_stopped: list[int]  # workers still running ORPHAN_GRACE_S after a run dlprobe ended (--on-hang stop, tune)
    orphans_left: list[int]  # workers still running ORPHAN_GRACE_S after the job's exit, left running as python does
    problems: list[SupervisorProblem]  # the supervisor's own failures (supervisor/problems.py); absent when none
    stderr: StderrKept  # what of the script's stderr stderr.log keeps (supervisor/stderr_copy.py)


class AttachRecord(TypedDict, total=False):
    """attach.json: the outside view of `dlprobe attach` (supervisor/attach.py), read by analysis/findings/attach.py."""

    asked_pid: int
    root_pid: int
    notes: list[str]  # what PID turned out to be (a worker, one rank of several)
    t_start: float
    t_end: float
    interrupted: bool  # Ctrl-C ended the window early
    job_ended: bool  # every process of the tree exited during the window
    # per process: pid, ppid, comm, cmdline, role (main|worker|launcher|other), main_pid, rank, local_rank,
    # cpu_s (utime+stime over the window; None if it was not seen at both ends), state, wchan, syscall,
    # first_seen, gone_at, stack (threads, innermost frame first), stack_error
    processes: list[dict[str, Any]]
    stack_problem: dict[str, Any] | None  # kind (missing | permission | failed), error, advice
    rerun: str  # the `dlprobe run` command that gives the in-process findings
