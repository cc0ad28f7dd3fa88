"""The kinds of record: the "ev" of every events.jsonl line, the "k" of every samples.jsonl line, and the fixed
values some fields take (launch, stop reason, sampler status, sample-check outcome). Imported through
rundir/schema.py; each event kind's TypedDict is in rundir/events.py, start_events.py or takeover_events.py."""

# --- events.jsonl: the "ev" field of each line ----------------------------------------------------------
EV_START = "start"
EV_SCRIPT_ERROR = "script_error"
# torchrun's ChildFailedError summary, recorded by the launcher process itself as it ends (in_training/target.py)
EV_LAUNCHER_FAILURE = "launcher_failure"
EV_STOP = "stop"
EV_LOADER = "loader"
EV_LOADER_ERROR = "loader_error"
# A worker's exception reached the loop: the index it failed on, loaded again alone in a forked child
# (in_training/sample_check.py), and what happened. Outcomes:
SAMPLE_CHECK_FAILS = "fails"  # fails alone (and a control index it loaded just before loads, where there was one)
SAMPLE_CHECK_FAILS_ANY = "fails-any"  # fails alone, and so does the control index, with the same error: not the sample
SAMPLE_CHECK_LOADS = "loads"  # loads alone: not the sample
SAMPLE_CHECK_UNVERIFIED = "unverified"  # not loaded alone (`reason` says why)
# collate failed on a batch: its samples loaded one by one and compared by structure (in_training/batch_compare.py)
SAMPLE_CHECK_ODD = "odd"  # some samples' structure is unlike the rest's (`odd`, `common_signature`)
SAMPLE_CHECK_ALIKE = "alike"  # every sample has the same structure: not a shape or type mismatch
EV_SAMPLE_CHECK = "sample_check"
EV_START_METHOD = "start_method"
# --start-method applied to one loader (or not: `applied` false and `reason`), with the script's own choice
EV_START_METHOD_FORCED = "start_method_forced"
# A loader's workers could not start under spawn or forkserver: what the dataset holds that pickle refuses, or the
# script that starts workers while a worker re-runs it (no `if __name__ == "__main__":` guard)
EV_WORKER_START_FAILED = "worker_start_failed"
WORKER_START_UNPICKLABLE = "unpicklable"
WORKER_START_MAIN_GUARD = "main-guard"
EV_EPOCH = "epoch"
EV_BATCHES = "batches"
EV_EPOCH_END = "epoch_end"
# The workers' memory read by the main process when the epoch's last batch arrives, just before torch shuts them
# down: the end of their copy-on-write growth, which the supervisor's sampling can miss by up to a round.
EV_WORKERS_LAST = "workers_last"
# A worker's own memory as it starts, before the user's worker_init_fn: a load there (np.load of a table) can be done
# before the main process's reading of it right after iter() on a busy machine, and growth is measured from here.
EV_WORKER_START = "worker_start"
# A worker process's full (oldest-generation) garbage collections, timed (in_training/worker_gc.py): the first after
# a fork touches every object the worker inherited, which copies their pages, a one-time step of its memory.
EV_WORKER_GC = "worker_gc"
WORKER_GC_KEPT = 2  # a worker's full collections timed at most: the first is the one that copies
# A batch a worker's queue could not send (in_training/send_errors.py): CPython's queue thread failed to pickle it,
# printed the error on the worker's stderr and dropped it; the training loop waits for it forever.
EV_BATCH_SEND_ERROR = "batch_send_error"
# One DataLoader worker's batches, in chunks (in_training/worker_batches.py): when each fetch began, how long its
# samples and its collate took. Capped per worker: past the cap only every `stride`-th fetch is kept.
EV_WORKER_BATCHES = "worker_batches"
WORKER_BATCH_CAP = 5000  # rows a worker keeps at each stride before the stride doubles
# The loop's waits a loader keeps at each stride before the stride doubles (then every 2nd, 4th, ... batch's wait is
# kept, and each `batches` event adds its chunk's exact count and sums): a loader's waits stay log-bounded.
WAITS_KEPT_PER_STRIDE = 50_000
# live_summary.json's data_wait_share: the share of this much of the loop's recent time spent waiting for data
LIVE_WAIT_WINDOW_S = 10.0
FOLDED_FLUSH_S = 2.0  # a loader whose waits are folded sends a chunk every 2 s, not every 0.25 s
EV_BATCH_INFO = "batch_info"
EV_DUPES = "dupes"
EV_FORK_STATE = "fork_state"
EV_FORK_HANDLES = "fork_handles"  # descriptors objects of the dataset hold as a loader forks (in_training/fork_handles)
# A worker's random generators held on its dataset (in_training/rng_streams.py): each one's state as the main process
# forked it, as the worker started (after worker_init_fn) and after the worker's first batch.
EV_WORKER_RNG = "worker_rng"
# How many items the dataset's data attributes hold inside one worker (in_training/worker_attrs.py): at its start,
# when a count changed (at most every second, then less often), and at its end.
EV_WORKER_ATTRS = "worker_attrs"
WORKER_ATTRS_MAX = 32  # attributes counted per worker at most
# The order of the indices a loader's sampler gave in one complete epoch, one running hash (in_training/sample_order.py)
EV_SAMPLE_ORDER = "sample_order"
EV_START_READINESS = "start_readiness"  # what the other start methods would make of a loader (start_readiness.py)
# the readiness check was not run for a loader: `reason` (a fork the script would see, a memory limit too close)
EV_START_READINESS_SKIPPED = "start_readiness_skipped"
EV_ACCEL = "accel"
EV_STARTUP_PROFILE = "startup_profile"
EV_TAKEOVER = "takeover"
EV_TUNE_LOADER = "tune_loader"
EV_TUNE_LOOP = "tune_loop"  # the script's loop timed, written at exit where it stopped before the take-over
EV_TRIAL_START = "trial_start"
EV_TRIAL_END = "trial_end"
EV_TRIAL_SKIPPED = "trial_skipped"
# The pick and the best measured once more before tune recommends (keys, their first rates, the tolerance)
EV_TUNE_CONFIRM = "tune_confirm"
EV_TUNE_WORKERS_STOP = "tune_workers_stop"  # why tune tried no more worker counts (reason, top: the highest planned)
EV_SCAN_START = "scan_start"
EV_SCAN_PROGRESS = "scan_progress"
EV_SCAN_BAD = "scan_bad"
EV_SCAN_ERROR = "scan_error"
EV_SCAN_SKIPPED = "scan_skipped"  # a loader found alive that cannot be scanned; the scan goes on
EV_SCAN_END = "scan_end"
EV_PROBE_ERROR = "probe_error"  # the probe's own failure inside the training process (rate-limited)
# Who a probed process is (pid, rank, local rank, world size, node, host): written by every process that builds a
# DataLoader, before its first "loader" event, and again whenever its identity changes (Lightning's rank 0
# learns its rank only when it joins the process group). Loaders are keyed by (writer pid, loader id);
# the rank is how they are shown. A single-script run writes one, with the ranks null.
EV_PROCESS = "process"

# --- samples.jsonl: the "k" field of each line -----------------------------------------------------------
SAMPLE_PROC = "proc"  # a process seen for the first time
SAMPLE_READING = "s"  # one round of readings (per process and for the system)
SAMPLE_GONE = "gone"  # a process ended
SAMPLE_UNREAD = "unread"  # a process whose memory (smaps_rollup) could not be read: pid, t, error (once per process)
SAMPLE_THREAD = "thread"  # a worker thread (worker_method="thread") seen for the first time: pid, tid, comm
SAMPLE_FD_TARGETS = "fdt"  # what a process's descriptors point to, read when its count climbed: pid, t, n, top,
# nofile (its RLIMIT_NOFILE read again then)
# Fields of a process's reading besides its memory (rss, uss, ... in bytes): CPU seconds it has used (utime+stime,
# /proc/PID/stat) and seconds it has waited for a core (/proc/PID/schedstat), both cumulative since it started;
# absent where they could not be read (runs recorded before dlprobe read them too).
SAMPLE_CPU = "cpu"
SAMPLE_RUN_DELAY = "runq"
SAMPLE_FDS = "fd"  # open file descriptors (len of /proc/PID/fd), read every few ticks
# Seconds after the round's "t" at which this process's smaps_rollup read ended (full reads only). A round reads the
# processes one after another, the training process's large map first, so a worker's reading can be tens of
# milliseconds younger than the round's stamp: a copy it shows may have begun after the stamp.
SAMPLE_READ_AT = "at"

# --- meta.json: how the target was started -----------------------------------------------------------------
LAUNCH_SCRIPT = "script"  # dlprobe run train.py ARGS
LAUNCH_MODULE = "module"  # dlprobe run -m pkg.mod ARGS
LAUNCH_COMMAND = "command"  # dlprobe run -- torchrun ... / bash train.sh / python -m ...: hooks via the environment

# --- result.json: why dlprobe itself ended the run --------------------------------------------------------
STOP_REASON_HANG = "hang"  # the hang guard stopped it (--on-hang stop)


# --- stacks.json: how the hotspot sampler (`py-spy record`) fared -------------------------------------------
SAMPLER_OK = "ok"
SAMPLER_OFF = "off"  # turned off on purpose (DLPROBE_STACK_RATE=0, or DLPROBE_PY_SPY set empty)
SAMPLER_MISSING = "missing"  # no py-spy found (none installed, or DLPROBE_PY_SPY names no executable)
SAMPLER_FAILED = "failed"  # py-spy could not start, or exited with an error and saved no stacks
SAMPLER_ENDED = "ended"  # the script had ended before py-spy attached: nothing to sample, not a failure
