"""What the supervisor tells the training process through its environment, and the exit codes it gets back."""

from __future__ import annotations

# Both sides import these names from here, never from each other: the process boundary is a layer rule
# (see ARCHITECTURE.md and `lint-imports`).
RUN_DIR_ENV = "DLPROBE_RUN_DIR"  # where the hooks write events; unset means the hooks stay off

# Commands that need the script's DataLoader but not its training (scan, tune) set these: when loader N is first
# iterated, the named function "package.module:function" gets the DataLoader, and its int result ends the script.
TAKEOVER_ENV = "DLPROBE_TAKEOVER"
TAKEOVER_LOADER_ENV = "DLPROBE_TAKEOVER_LOADER"

# `dlprobe check` bounds a run: after N batches or at a wall-clock deadline (time.time(), the supervisor's clock)
STOP_AFTER_BATCHES_ENV = "DLPROBE_STOP_AFTER_BATCHES"
STOP_AT_ENV = "DLPROBE_STOP_AT"
STOP_EVENT = "stop"  # the event the target writes when one of those limits ends the run

# `dlprobe tune`: the trial plan for one sweep (JSON) and the exit code of a script whose loader gave no batch
TUNE_CONFIG_ENV = "DLPROBE_TUNE_CONFIG"
EXIT_NO_BATCHES = 3
