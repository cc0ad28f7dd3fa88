"""What torch's DataLoader says and does that more than one side of dlprobe reads: its messages, the names it gives
its shared storages, and the fix for what they mean. One home, so `dlprobe run` (analysis) and `dlprobe triage` (a
log) name the same cause in the same words."""

from __future__ import annotations

import re

# Descriptors ran out (the process's own limit): OSError's words, its errno, or C's name for it.
EMFILE = re.compile(r"Too many open files|\[Errno 24\]|EMFILE")
# Descriptors ran out, the process's own limit (EMFILE, errno 24) or the system's table (ENFILE, errno 23): whatever
# opened them, a sample that fails of it is not at fault.
OUT_OF_DESCRIPTORS = re.compile(r"Too many open files|\[Errno 2[34]\]|EMFILE|ENFILE")
# /dev/shm had no room: torch's C++ words for a shared storage it could not make, or the OS's ENOSPC.
SHM_FULL = re.compile(r"unable to allocate shared memory|unable to write to file </torch_|No space left on device")
# torch's whole message for a storage /dev/shm had no room for, with the file it named and the OS's error.
SHM_ALLOCATE_FAILED = re.compile(r"unable to allocate shared memory\(shm\) for file <(?P<file>[^>]*)>: (?P<error>.*)")
# OSError's own words for EMFILE, as a log prints them.
EMFILE_OSERROR = re.compile(r"\[Errno 24\] Too many open files")

# torch's re-raise of a worker's exception in the training loop (ExceptionWrapper.reraise): "Caught OSError in
# DataLoader worker process 2." ("thread" for worker_method="thread" workers).
CAUGHT_IN_WORKER = re.compile(
    r"Caught (?P<exception>[\w.]+) in DataLoader worker (?P<worker_kind>process|thread) (?P<worker_id>\d+)\."
)
CAUGHT_IN_PIN_THREAD = re.compile(r"Caught (?P<exception>[\w.]+) in pin memory thread for device (?P<device>\d+)\.")
# torch's SIGCHLD handler and its worker-status check, in the training loop, when a worker process died.
WORKER_KILLED = re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<signal>[^.]+)\.")
WORKER_EXIT_CODE = re.compile(
    r"DataLoader worker \(pid (?P<pid>\d+)\) exited unexpectedly with exit code (?P<exit_code>-?\d+)"
)
WORKERS_EXITED = re.compile(r"DataLoader worker \(pid\(s\) (?P<pids>\d+(?:, *\d+)*)\) exited unexpectedly")
# Any of the three: a worker died (what an error file recording a worker's death says).
WORKER_DIED = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? \d+(?:, *\d+)*\) (?:is killed by signal|exited unexpectedly)"
)
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
    "Keep copies, not the received tensors: `kept.append(batch.clone())` for a tensor batch, "
    "`kept.append([t.clone() for t in batch])` for a list or tuple of them (`.detach().cpu().clone()` for what the "
    "model returns, `.item()` for a scalar such as the loss; `.numpy()` still shares the storage and its "
    "descriptor), or call `torch.multiprocessing.set_sharing_strategy('file_system')` at the start (storages then "
    "hold no descriptor, though /dev/shm still holds their bytes). Raising the limit (`ulimit -n`) only delays it."
)


def caught_in_worker_process(text: str) -> tuple[str, int] | None:
    """(exception type, worker id) of torch's "Caught X in DataLoader worker process N." in `text`, or None (also
    for a thread worker's, whose exception is the training process's own)."""
    match = CAUGHT_IN_WORKER.search(text)
    if match is None or match["worker_kind"] != "process":
        return None
    return match["exception"], int(match["worker_id"])


# Errors known to come from a handle the workers share because it was opened before they forked, as the libraries
# word them (seen on real runs: tests/fixtures/logs/fork_*.log): (library as users import it, what it means, the other
# cause the same words can have and how it differs, the pattern over the exception's type, message and traceback).
# One of these is never a bad sample, whatever index it landed on: another worker moved the shared offset, took the
# reader slot, or wrote to the same connection.
FORK_SHARED_ERRORS: tuple[tuple[str, str, str, re.Pattern[str]], ...] = (
    ("lmdb", "LMDB's reader table or transaction used from a forked copy of the environment",
     "more readers at once than the environment's max_readers (126 by default), which fails alike with "
     "the environment opened in each worker",
     re.compile(r"MDB_BAD_RSLOT|MDB_READERS_FULL|MDB_BAD_TXN|mdb_txn_begin: Invalid argument"
                r"|lmdb\.\w*Error\b.*mdb_txn_begin")),
    ("zipfile", "a zip archive read through one file offset all the workers move",
     "a member damaged on disk, which fails at the same index every run, also loaded alone",
     re.compile(r"Bad CRC-32 for file|Bad magic number for file header|Truncated file header|Overlapped entries"
                r"|File name in directory .* and header .* differ|zipfile\.BadZipFile: (?:Bad|Truncated)"
                r"|zlib\.error: Error -3 while decompressing(?s:.*)zipfile\.py"
                r"|zipfile\.py(?s:.*)zlib\.error: Error -3 while decompressing")),
    ("tarfile", "a tar archive read through one file offset all the workers move",
     "a member damaged on disk, which fails at the same index every run, also loaded alone",
     re.compile(r"zlib\.error: Error -3 while decompressing(?s:.*)tarfile\.py"
                r"|tarfile\.py(?s:.*)zlib\.error: Error -3 while decompressing"
                r"|tarfile\.ReadError: (?:unexpected end of data|invalid header|bad checksum|empty header)")),
    ("h5py", "an HDF5 file read through one file description all the workers share",
     "a file damaged on disk, which fails at the same index every run, also loaded alone",
     re.compile(r"Can't (?:synchronously )?read data \((?:inflate\(\) failed|wrong B-tree signature|addr overflow"
                r"|filter returned failure|file read failed)")),
    ("ssl", "one TLS connection written by several processes (its record numbers replayed)",
     "a proxy that breaks TLS, which fails for one process alone too",
     re.compile(r"DECRYPTION_FAILED_OR_BAD_RECORD_MAC|SSLV3_ALERT_BAD_RECORD_MAC|\[SSL: BAD_RECORD_MAC\]"
                r"|\[SSL: WRONG_VERSION_NUMBER\]")),
    ("http.client", "one HTTP connection read by several processes (a reply read by the wrong worker)",
     "a server that garbles its replies, which fails for one process alone too",
     re.compile(r"BadStatusLine|LineTooLong|Connection broken: IncompleteRead|InvalidChunkLength")),
    ("http.client", "one keep-alive connection used by several processes (the server dropped it for another's "
     "request)", "a server that closes idle keep-alive connections, which fails for one process alone too",
     re.compile(r"RemoteDisconnected\('Remote end closed connection without response'\)")),
)  # fmt: skip


def fork_shared_error(text: str) -> tuple[str, str, str] | None:
    """(library, what it means, the other cause of the same words) where `text` (an exception with its message and
    traceback) is an error a handle shared across the fork raises; None otherwise."""
    for library, meaning, alternative, pattern in FORK_SHARED_ERRORS:
        if pattern.search(text):
            return library, meaning, alternative
    return None


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
