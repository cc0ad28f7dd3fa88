"""Index 5 raises in its worker; loaded anywhere else (dlprobe's sample check) it takes a minute. The script's own
`except` block runs as the error arrives and says whether dlprobe's check of it had already ended: it must not have
(the check runs beside the training, never before the training's own exception)."""

import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class SlowAlone(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            if get_worker_info() is not None:
                raise ValueError("record 5 is corrupt")
            time.sleep(60)  # outside a worker: dlprobe's copy, which the check stops at its limit
        return torch.tensor(float(index))


def checks_written() -> int:
    run_dir = os.environ.get("DLPROBE_RUN_DIR")
    if not run_dir:
        return 0
    with open(os.path.join(run_dir, "events.jsonl")) as events:
        return sum(1 for line in events if json.loads(line).get("ev") == "sample_check")


try:
    for _batch in DataLoader(SlowAlone(), batch_size=2, num_workers=2):
        pass
except ValueError as exc:
    print(f"caught: {str(exc).splitlines()[0]}; sample checks already written: {checks_written()}", flush=True)
    raise SystemExit(3) from None
