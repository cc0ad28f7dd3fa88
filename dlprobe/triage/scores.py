"""How much each kind of evidence in a log weighs: the one table that orders triage's candidate causes."""

from __future__ import annotations

# A score only orders the causes of one log (highest first, ties by the line they were seen on); it is not a
# probability. The bands: 90-99 a message that names its cause (or a kernel record that confirms it), 80-89 a cause
# the log points at strongly but does not state, 55-79 a cause the signal makes likely without a record to confirm
# it, under 50 the alternative kept beside a weak first guess, and 20-29 warnings, which rank below every failure.

# -- worker deaths by SIGKILL (or unexplained): out of memory, and what else sends SIGKILL --
OOM_KERNEL_RECORD = 98  # the kernel log has an OOM kill of one of the dead workers' pids: confirmed
OOM_KERNEL_RECORD_CAUSE_UNKNOWN = 95  # the same record, but the log did not say how the worker died
OOM_KILL_NEAR_IN_TIME = 88  # an OOM kill of some DataLoader worker near the log's end (pids differ in a container)
OOM_CGROUP_COUNTS_KILLS = 82  # the memory cgroup counts OOM kills, with no record to tie one to the worker
OOM_NO_KERNEL_LOG = 72  # SIGKILL and no kernel log to check: the OOM killer is still the usual sender
DEATH_CAUSE_UNKNOWN = 60  # the worker exited and the log does not say how
OOM_NOT_IN_KERNEL_LOG = 55  # SIGKILL, yet the readable kernel log has no OOM kill for it
KILLED_FROM_OUTSIDE = 45  # the alternative to a weak OOM guess: a scheduler, a watchdog, a `kill -9`

# -- worker deaths by other signals --
SHM_BUS_ERROR = 90  # SIGBUS with a small /dev/shm: the tmpfs that holds the batches is the usual cause
SHM_BUS_ERROR_ROOMY = 75  # SIGBUS although /dev/shm is big (2 GiB or more): a mapped file is as likely
MAPPED_FILE_BUS_ERROR_ROOMY = 60  # SIGBUS from a truncated memory-mapped file, /dev/shm being big
MAPPED_FILE_BUS_ERROR = 35  # the same, /dev/shm being small enough to be the likelier cause
WORKER_EXIT_CODE = 90  # the worker ended itself with an exit code: the log says so
NATIVE_CRASH = 90  # SIGSEGV, SIGABRT, SIGFPE, SIGILL: only native code does that
STOPPED_BY_SIGNAL = 80  # SIGTERM, SIGINT...: sent from outside, by whom the log cannot say

# -- messages that name their cause --
SHM_ALLOCATION_FAILED = 97  # torch could not create a batch's shared-memory file: the error says so
CUDA_IN_FORKED_WORKER = 96  # CUDA's own "Cannot re-initialize CUDA in forked subprocess"
LOADER_CONFIG = 95  # the DataLoader's constructor refused an option
TOO_MANY_OPEN_FILES = 94  # "Too many open files" while receiving batches
COLLATE_ERROR = 93  # default_collate's own message about the batch's samples
PICKLE_ERROR = 92  # the dataset could not be pickled into spawn/forkserver workers
SAMPLE_EXCEPTION = 90  # an exception raised in a worker's __getitem__, re-raised in the main process
FORK_SHARED_ERROR = 91  # that exception is one a handle opened before the fork raises (lmdb, zip, TLS): not the sample
ERRORS_ALIKE = 89  # one exception at several indices or workers, alike but for its numbers: shared state
PIN_MEMORY_THREAD = 85  # the pin-memory thread died: a known bug, but its message can have other causes

# -- a DataLoader timeout: the hint beside it decides how sure the cause is --
HANG_TOKENIZERS_FORK = 90  # tokenizers warned that it forked after its thread pool ran
HANG_THREADS_AT_FORK = 86  # Python warned that the process had threads when it forked
HANG_UNKNOWN = 84  # a timeout with no hint: a stuck worker or a slow batch, the log cannot tell

# -- the training process itself killed --
MAIN_OOM_NEAR_IN_TIME = 85  # the kernel log has an OOM kill near the log's end
MAIN_OOM_UNCONFIRMED = 62  # SIGKILL of the main process without a record to confirm it

# -- warnings: worth reading, never the failure --
TOO_MANY_WORKERS_WARNING = 20
ITERABLE_DUPLICATES_WARNING = 25  # above too-many-workers: duplicated samples change the training itself
