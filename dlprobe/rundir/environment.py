"""What the supervisor hands the target through its environment: every DLPROBE_* variable, and the exit
code, process name and limits both sides agree on. Imported through rundir/schema.py."""

# --- environment variables the supervisor sets for the target --------------------------------------------
RUN_DIR_ENV = "DLPROBE_RUN_DIR"
TAKEOVER_ENV = "DLPROBE_TAKEOVER"  # module:function that takes over the loader instead of the training loop
TAKEOVER_LOADER_ENV = "DLPROBE_TAKEOVER_LOADER"
# Steps of the script's own training loop to time before the take-over (tune: the loop's own step bounds the job)
TAKEOVER_STEPS_ENV = "DLPROBE_TAKEOVER_STEPS"
STOP_AFTER_BATCHES_ENV = "DLPROBE_STOP_AFTER_BATCHES"
STOP_AT_ENV = "DLPROBE_STOP_AT"  # a wall-clock deadline (time.time()), shared with the supervisor's clock
TUNE_CONFIG_ENV = "DLPROBE_TUNE_CONFIG"
EXIT_NO_BATCHES = 3  # a tune trial's exit code when its loader gave no batch
SCAN_OPTIONS_ENV = "DLPROBE_SCAN_OPTIONS"
NO_STARTUP_PROFILE_ENV = "DLPROBE_NO_STARTUP_PROFILE"
# Where the dlprobe package lives, for the sitecustomize injected on PYTHONPATH: a command may run a python that has
# dlprobe on no path of its own (another venv, `python -I` aside); the hook appends this only if its import fails.
PACKAGE_PATH_ENV = "DLPROBE_PACKAGE_PATH"
# "SUPERVISOR_PID:LAUNCH:NAME", read by the injected sitecustomize: the Python process whose parent is that supervisor
# is the target `dlprobe run` started (python SCRIPT, python -m NAME, or a command's first Python process), probed
# from its first line without a frame of dlprobe's on its stack (in_training/target.py).
TARGET_ENV = "DLPROBE_TARGET"
# `dlprobe run --start-method M`: every DataLoader with workers starts them with M (as its multiprocessing_context,
# set by the hooks as each loader is iterated; "thread": worker_method="thread" where the installed torch has it).
START_METHOD_ENV = "DLPROBE_START_METHOD"
# --no-isolated-checks: no copy of the training is forked for dlprobe's own checks (in_training/quiet_fork.py)
NO_ISOLATED_CHECKS_ENV = "DLPROBE_NO_ISOLATED_CHECKS"
# `dlprobe run --log-to wandb,mlflow`: the libraries the training process logs the live summary into (the script's own
# active run only; in_training/sinks.py), comma-separated
LOG_TO_ENV = "DLPROBE_LOG_TO"
LOG_TO_CHOICES = ("wandb", "mlflow")
# The probe_error `where` of a --log-to sink: "--log-to wandb" (analysis/findings/probe.py words its finding so)
LOG_TO_WHERE = "--log-to"
# /proc/PID/comm of the processes dlprobe forks from the training for its own checks (the readiness copy, the sample
# check's checker and its sandboxed child): ps and top show them, the supervisor waits for the checker by it
CHECK_PROCESS_NAME = "dlprobe-check"
START_METHOD_CHOICES = ("fork", "forkserver", "spawn", "thread")
# stderr.log keeps at most this much of what the run wrote to stderr (its end): the page's tail and torchrun's
# summary are read from the end (analysis/run/stderr_log.py).
STDERR_KEPT_BYTES = 1 << 20
STDERR_HEAD_BYTES = 64 << 10  # of those, the run's first bytes (the first error), where it wrote more
