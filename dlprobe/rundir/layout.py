"""The run directory's layout: the name of every file and folder a run directory may hold, defined once.

Imported through rundir/schema.py; tests/conftest.py:names_not_in_schema checks real runs against RUN_DIR_NAMES."""

# --- files and folders of a run directory -------------------------------------------------------------
META_FILE = "meta.json"
EVENTS_FILE = "events.jsonl"
SAMPLES_FILE = "samples.jsonl"
RESULT_FILE = "result.json"
REPORT_FILE = "report.json"
PLOT_FILE = "memory.png"
REPORT_HTML_FILE = "report.html"  # the self-contained page (render/html.py, its timeline analysis/report/timeline.py)
TRACE_FILE = "trace.json"  # Trace Event Format for Perfetto / chrome://tracing (analysis/report/trace.py)
# `dlprobe run` draws the plot in a detached process (commands/plot_process.py) that writes here and renames, so a
# reader never sees half a PNG; a failure to draw is written down instead of lost with the process's stderr.
PLOT_PARTIAL_FILE = "memory.png.partial"
PLOT_ERROR_FILE = "memory.png.error.txt"
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
KERNEL_FILE = "kernel.json"
CHECK_FILE = "check.json"
STACKS_FILE = "stacks.txt"  # py-spy's raw (collapsed) format: one line per distinct stack, with its count
# One py-spy burst's output, stacks.txt + this, appended to stacks.txt and removed when the burst ends.
STACKS_BURST_SUFFIX = ".burst"
STACKS_META_FILE = "stacks.json"
STACKS_SPEEDSCOPE_FILE = "stacks.speedscope.json"  # stacks.txt for speedscope.app (analysis/report/speedscope.py)
PY_SPY_LOG_FILE = "py-spy.log"
HANGS_DIR = "hangs"
INFLIGHT_DIR = "inflight"
STACKS_DIR = "stacks"  # stack dumps: py-spy JSON and the targets' own faulthandler output
# Every process of the target appends here when signalled; the supervisor signals one process at a time.
FAULTHANDLER_FILE = "faulthandler.txt"
# `dlprobe tune` writes these in its own root directory, next to the trial runs.
TUNE_RESULT_FILE = "tune.json"
TUNE_PLOT_FILE = "tune.png"


def tune_attempt_name(number: int) -> str:
    """attempt-N: the run directory of `dlprobe tune`'s Nth attempt, in its root beside tune.json."""
    return f"attempt-{number}"


# `dlprobe attach`: what it saw of a job it did not start (the tree, each process's CPU time and stack at the end).
ATTACH_FILE = "attach.json"
# `dlprobe run --log-to wandb|mlflow`: the supervisor's latest per-worker readings (LiveSummary in file_records.py),
# replaced whole at each refresh; the training process logs them into the script's own W&B or MLflow run.
LIVE_SUMMARY_FILE = "live_summary.json"

HANG_RECORD_GLOB = "hang-*.json"


def hang_record_name(number: int) -> str:
    """hangs/hang-N.json: the supervisor's record of its Nth hang dump."""
    return f"hang-{number}.json"


def hang_stack_name(number: int, pid: int) -> str:
    """stacks/hangN-PID.json: py-spy's raw dump of one process during hang N."""
    return f"hang{number}-{pid}.json"


INFLIGHT_SLOT_SUFFIX = ".bin"
# Each DataLoader worker's fatal-signal record (faulthandler's text, written by the worker's own signal handler as it
# dies of SIGSEGV, SIGBUS, SIGFPE, SIGABRT or SIGILL): how a worker died, whatever error torch raised for it.
FAULTS_DIR = "faults"
FAULT_RECORD_SUFFIX = ".txt"


def fault_record_name(pid: int) -> str:
    """faults/PID.txt: one worker's fatal-signal record; empty (or removed at its clean exit) if it did not crash."""
    return f"{pid}{FAULT_RECORD_SUFFIX}"


def inflight_slot_name(pid: int) -> str:
    """inflight/PID.bin: one process's in-flight slot (layout in rundir/inflight_format.py)."""
    return f"{pid}{INFLIGHT_SLOT_SUFFIX}"


# Every name above, for tests and tools that list what a run directory may hold.
RUN_DIR_NAMES = (
    META_FILE,
    EVENTS_FILE,
    SAMPLES_FILE,
    RESULT_FILE,
    REPORT_FILE,
    PLOT_FILE,
    REPORT_HTML_FILE,
    TRACE_FILE,
    PLOT_PARTIAL_FILE,
    PLOT_ERROR_FILE,
    STDOUT_FILE,
    STDERR_FILE,
    KERNEL_FILE,
    CHECK_FILE,
    STACKS_FILE,
    STACKS_META_FILE,
    STACKS_SPEEDSCOPE_FILE,
    PY_SPY_LOG_FILE,
    HANGS_DIR,
    INFLIGHT_DIR,
    FAULTS_DIR,
    STACKS_DIR,
    FAULTHANDLER_FILE,
    TUNE_RESULT_FILE,
    TUNE_PLOT_FILE,
    ATTACH_FILE,
    LIVE_SUMMARY_FILE,
)
