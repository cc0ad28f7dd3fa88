"""One DataLoader whose sample FAULT_INDEX misbehaves in a worker, chosen by argv[1]:

hang       the sample's read never returns (blocks on a pipe)
lock       the sample takes a lock that a parent thread held at fork time
segfault   the sample dereferences NULL (native crash)
abort      the sample calls abort()
oom        the sample allocates memory until the kernel kills the worker (run it in a memory cgroup)
exception  the sample raises ValueError
exit       the worker calls os._exit(3)
bus        the worker gets SIGBUS (what a full /dev/shm looks like)
shm        batches of ~12 MiB (run it with a small /dev/shm)
ok         nothing goes wrong
argv[2] (optional): num_workers (default 2). argv[3] (optional): DataLoader timeout in seconds (default 0).
"""

import ctypes
import os
import signal
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

FAULT_INDEX = 13
LOCK = threading.Lock()


def hold_lock_forever():
    while True:
        with LOCK:
            time.sleep(0.5)


class FaultyDataset(Dataset):
    def __init__(self, mode):
        self.mode = mode

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.mode == "shm":
            return torch.ones(3, 256, 256) * i
        if i == FAULT_INDEX:
            self.misbehave()
        return torch.tensor([i])

    def misbehave(self):
        mode = self.mode
        if mode == "hang":
            read_end, _write_end = os.pipe()
            os.read(read_end, 1)
        elif mode == "lock":
            with LOCK:
                pass
        elif mode == "segfault":
            ctypes.string_at(0)
        elif mode == "abort":
            os.abort()
        elif mode == "oom":
            # The kernel kills the process with the highest badness in the cgroup; on a busy machine that was once
            # the main process (torch's own pages), so the test saw exit 137 instead of a worker's death. This worker
            # asks to be the one, as the process that allocates in a real OOM usually is.
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("1000")
            hoard = []
            while True:
                hoard.append(bytearray(64 * 1024 * 1024))
        elif mode == "exception":
            raise ValueError(f"corrupt record at index {FAULT_INDEX}")
        elif mode == "exit":
            os._exit(3)
        elif mode == "bus":
            os.kill(os.getpid(), signal.SIGBUS)


if __name__ == "__main__":
    mode = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 0
    if mode == "lock":
        threading.Thread(target=hold_lock_forever, daemon=True).start()
        time.sleep(0.1)
    batch_size = 16 if mode == "shm" else 2
    loader = DataLoader(FaultyDataset(mode), batch_size=batch_size, num_workers=workers, timeout=timeout)
    seen = 0
    for batch in loader:
        seen += len(batch)
        time.sleep(0.05)
    print(f"done: {seen} samples")
