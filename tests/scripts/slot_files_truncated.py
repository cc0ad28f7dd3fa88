"""Mid-epoch, every file under the run directory's inflight/ is cut to 0 bytes (`truncate -s 0 RUN/inflight/*.bin`,
as an audit did), then the loop goes on: 2 workers keep loading a slow-ish dataset for two epochs. Under plain
python there is no run directory and nothing is cut; the output is the same either way."""

import os
import subprocess
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class Slowish(Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.tensor([i])


def cut_slot_files():
    run_dir = os.environ.get("DLPROBE_RUN_DIR")
    if not run_dir:
        return
    slots = sorted(str(p) for p in (Path(run_dir) / "inflight").iterdir())
    # the loop's slot and both workers' (each has sent a batch by now)
    assert len(slots) >= 3, slots
    subprocess.run(["truncate", "-s", "0", *slots], check=True)


if __name__ == "__main__":
    loader = DataLoader(Slowish(), batch_size=4, num_workers=2)
    for epoch in range(2):
        total = 0
        for number, batch in enumerate(loader):
            total += int(batch.sum())
            if epoch == 0 and number == 3:
                cut_slot_files()
        print(f"epoch {epoch}: sum {total}", flush=True)
    print("done", flush=True)
