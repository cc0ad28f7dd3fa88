"""What torch's DataLoader says and does that more than one side of dlprobe reads: its messages, the names it gives
its shared storages, and the fix for what they mean. One home, so `dlprobe run` (analysis) and `dlprobe triage` (a
log) name the same cause in the same words."""

from __future__ import annotations

import re

# Descriptors ran out (the process's own limit): OSError's words, its errno, or C's name for it.
EMFILE = re.compile(r"Too many open files|\[Errno 24\]|EMFILE")
# torch's RuntimeError in the main process when it cannot take the next batch's descriptor off a worker's queue
# (dataloader.py, _try_get_data): the receiving side ran out, not a worker.
MAIN_OUT_OF_DESCRIPTORS = r"Too many open files\. Communication with the workers is no longer possible"
# A tensor's shared storage as /proc/PID/fd links it: /dev/shm/torch_<pid>_<random>_<n>, " (deleted)" once unlinked
# (torch's default `file_descriptor` strategy unlinks it at once and keeps the descriptor while the storage lives).
TORCH_SHM_PREFIX = "/dev/shm/torch_"

# The cause and fix when the process receiving batches holds their storages' descriptors: under the default
# `file_descriptor` strategy every shared tensor it keeps holds one (measured with torch 2.13: `.numpy()` of a
# received tensor still holds it; `.clone()`, `.detach().cpu().clone()` and `.item()` do not).
KEPT_BATCHES_CAUSE = (
    "under torch's default `file_descriptor` sharing strategy every tensor a worker sends arrives as a "
    "shared-memory storage that holds one open descriptor until the tensor is freed, so the batches the loop keeps "
    "(a list of them, a cache, a loss kept as a tensor) keep their descriptors"
)
KEPT_BATCHES_FIX = (
    "Keep copies, not the received tensors: `kept.append(batch.clone())` (`.detach().cpu().clone()` for what the "
    "model returns, `.item()` for a scalar such as the loss; `.numpy()` still shares the storage and its "
    "descriptor), or call `torch.multiprocessing.set_sharing_strategy('file_system')` at the start (storages then "
    "hold no descriptor, though /dev/shm still holds their bytes). Raising the limit (`ulimit -n`) only delays it."
)

# How torch's main process says a worker died (dataloader.py, _MultiProcessingDataLoaderIter's SIGCHLD handler and
# its check of the workers): read by `dlprobe run`'s analysis and by a dying torchrun rank (in_training/death_cause).
WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)\.")
WORKER_EXIT = re.compile(r"DataLoader worker \(pid (\d+)\) exited unexpectedly with exit code (-?\d+)\.")
WORKERS_EXITED = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
# torch names the signal with strsignal()'s text: (signal name, worker-killed cause)
TORCH_SIGNALS = {
    "Killed": ("SIGKILL", "oom"),
    "Bus error": ("SIGBUS", "bus"),
    "Segmentation fault": ("SIGSEGV", "segfault"),
    "Aborted": ("SIGABRT", "abort"),
    "Floating point exception": ("SIGFPE", "fpe"),
    "Illegal instruction": ("SIGILL", "sigill"),
    "Terminated": ("SIGTERM", "signal"),
}
