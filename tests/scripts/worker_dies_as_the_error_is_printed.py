"""The script's own error ends it, and one of its DataLoader workers dies (SIGSEGV) the first time the error's text
is read: by the probe's record of it under dlprobe, by python's traceback printer without it. torch's SIGCHLD
handler then runs in the main process, exactly as when a worker crashes while a script is already failing."""

import multiprocessing
import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([i * i])


class BatchRejected(Exception):
    def __init__(self, worker_pid):
        super().__init__("batch 0 rejected by the training step")
        self.worker_pid = worker_pid
        self.killed = False

    def __str__(self):
        if not self.killed:
            self.killed = True
            os.kill(self.worker_pid, signal.SIGSEGV)
            os.waitid(os.P_PID, self.worker_pid, os.WEXITED | os.WNOWAIT)  # dead: SIGCHLD is on its way
        return super().__str__()


if __name__ == "__main__":
    # torch's SIGCHLD handler only hears of workers that are this process's children: under forkserver they are the
    # server's, so this script starts them by spawn there (fork and spawn are left as chosen).
    context = "spawn" if multiprocessing.get_start_method() == "forkserver" else None
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context=context)
    batches = iter(loader)
    first = next(batches)
    print(f"first batch {first.flatten().tolist()}", flush=True)
    raise BatchRejected(batches._workers[0].pid)
