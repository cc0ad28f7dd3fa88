"""A worker's death that torch reports without its signal: the loader's liveness check reaped the worker before
torch's SIGCHLD handler saw it, so torch says only "exited unexpectedly" (the race that failed a clean-clone CI run
of the torchrun summary test). A real DataLoader, a real SIGKILL, torch's real frames."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from dlprobe.in_training.death_cause import from_exception


class Slow(Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(60)  # the worker is killed while it holds this index
        return torch.tensor(index)


def test_a_reaped_workers_signal_is_read_from_the_process_that_reaped_it() -> None:
    iterator = iter(DataLoader(Slow(), num_workers=1))
    # Without torch's SIGCHLD handler only the liveness check (every 5 s) sees the death, as in the race.
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        [worker] = iterator._workers  # type: ignore[attr-defined]
        os.kill(worker.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError) as caught:
            next(iterator)
    finally:
        signal.signal(signal.SIGCHLD, previous)
        iterator._shutdown_workers()  # type: ignore[attr-defined]
    assert "exited unexpectedly" in str(caught.value) and "killed by signal" not in str(caught.value)
    death = from_exception(caught.value)
    assert death is not None and death.pid == worker.pid
    assert death.signal == "SIGKILL" and death.exit_code is None
    assert death.cause == "unknown"  # a SIGKILL with no OOM record is not an OOM kill
    assert "was killed by SIGKILL from outside" in death.verdict()
