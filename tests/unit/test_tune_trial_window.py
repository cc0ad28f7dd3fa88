"""A tune trial's steady window: at least MIN_STEADY_S past the batches in flight, however fast the loader."""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from dlprobe.in_training.tune_trials import MIN_STEADY_S, measure
from dlprobe.tune.plan import trial


def test_a_fast_loader_is_timed_for_the_whole_steady_window_not_only_its_batch_count() -> None:
    # 40 batches of a tensor slice take milliseconds: a window that short reads a passing burst of other work as the
    # loader's rate (on 16 cores, 14 workers read 7,110 samples/s against 10,600 over 600 batches).
    loader = DataLoader(TensorDataset(torch.arange(4096)), batch_size=16)
    result = measure(loader, trial(0, None, False, "workers"), batches=40, time_cap=30.0, deadline=time.time() + 60)
    assert result["status"] == "ok"
    assert result["measured_batches"] > 40
    # The rate is read over the steady window: its samples over its span, so the span is samples / rate.
    steady_samples = 16 * result["measured_batches"]
    assert steady_samples / result["samples_per_s"] >= MIN_STEADY_S


ONE_SHOT = """
import time, torch
from torch.utils.data import DataLoader, IterableDataset
from dlprobe.in_training.tune_trials import measure
from dlprobe.tune.plan import trial

class OneShot(IterableDataset):
    def __init__(self):
        self.used = False
    def __iter__(self):
        if not self.used:  # a stream that can be read once: a second pass yields nothing
            self.used = True
            yield from (torch.zeros(4) for _ in range(5 * 16))

loader = DataLoader(OneShot(), batch_size=16)
result = measure(loader, trial(0, None, False, "workers"), batches=40, time_cap=30.0, deadline=time.time() + 3)
print("RESULT", result["status"], result["batches"], result["passes"])
"""


def test_a_stream_that_yields_nothing_on_its_second_pass_ends_the_trial_instead_of_spinning():
    # The trial cycles a small dataset to reach its batches and its steady window; a pass that yields nothing cannot
    # add to either, and re-reading it forever ran until the hang watchdog ended the process (exit 4).
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", ONE_SHOT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RESULT" in proc.stdout and " 5 " in proc.stdout.split("RESULT")[1]
