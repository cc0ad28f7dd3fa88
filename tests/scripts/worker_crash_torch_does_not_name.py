"""A DataLoader worker segfaults on index 13 and the error that ends the script names no worker: what torch 2.15.0
raised first in about 1 run of 10 (a ConnectionResetError from reading a batch of the dying worker, before its
SIGCHLD handler's "DataLoader worker (pid N) is killed by signal"). Made certain here: torch's SIGCHLD handler is off,
the loop stops reading once the worker is dead, and the script raises that error itself.

argv[1]: "crash" (worker 0 segfaults on index 13) or "clean" (no worker dies; the same error ends the script).
"""

import ctypes
import errno
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

CRASH_INDEX = 13


class Crashes(Dataset):
    def __init__(self, crash):
        self.crash = crash

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.crash and i == CRASH_INDEX:
            ctypes.string_at(0)
        return torch.tensor([i])


def gone(pid):
    """The worker is dead: no such process, or a zombie (fork: our child; forkserver: the server's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


if __name__ == "__main__":
    crash = sys.argv[1] == "crash"
    loader = DataLoader(Crashes(crash), batch_size=2, num_workers=2)
    batches = iter(loader)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # torch's handler would name the death first
    for _ in range(4):  # worker 0 prefetches the batch [12, 13] meanwhile
        print(next(batches).flatten().tolist(), flush=True)
    worker = batches._workers[0].pid
    deadline = time.monotonic() + 30
    while crash and not gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"worker 0 gone: {gone(worker)}", flush=True)
    raise ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET))
