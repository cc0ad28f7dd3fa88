"""The training process allocates until the kernel's OOM killer kills IT, while its workers hold modest copy-on-write.

Run it in a memory cgroup. The parent builds 200k small dicts before the loader; each worker reads some of them per
sample (reference counts: modest copy-on-write). After the first batch the parent asks to be the OOM killer's choice
(oom_score_adj 1000; raising it needs no privilege) and keeps every batch plus 32 MiB of its own until the cgroup's
limit kills it. Its workers outlive it in turn: worker 0 exits as soon as it notices the death, the others linger
5 s once, so the last workers alive map the parent's formerly shared pages alone for a few readings (USS is read
every second or two on a busy machine), as the last workers of a killed job do (teardown, not copy-on-write), within
dlprobe's 6 s of recording after the training process ends. argv[1]: num_workers (2).
"""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

LINGER_S = 5.0
LINGERED = []


class Records(Dataset):
    def __init__(self, n: int = 200_000):
        self.rows = [{"id": i, "label": i % 10, "path": f"/data/img_{i:07d}.jpg"} for i in range(n)]
        self.parent = os.getpid()

    def __len__(self) -> int:
        return 160  # 40 batches: the kill comes about halfway through the epoch

    def __getitem__(self, i: int) -> torch.Tensor:
        start = (i * 997) % len(self.rows)
        total = sum(row["label"] for row in self.rows[start : start + 2000])
        for _ in range(4):
            if os.getppid() != self.parent and not LINGERED:  # the training process is gone
                info = get_worker_info()
                if info is None or info.id == 0:
                    os._exit(0)
                LINGERED.append(True)
                time.sleep(LINGER_S)  # as a slow last sample would; torch's watchdog ends it after this batch
                break
            time.sleep(0.05)
        return torch.tensor([total], dtype=torch.int64)


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    loader = DataLoader(Records(), batch_size=4, num_workers=workers)
    hoard = []
    for step, _batch in enumerate(loader):
        if step == 0:
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("1000")
        hoard.append(bytearray(32 * 1024 * 1024))
        hoard[-1][::4096] = b"x" * len(hoard[-1][::4096])  # touched: resident, charged to the cgroup
        time.sleep(0.1)
    sys.exit("the epoch ended before the kernel killed the training process: raise the allocation")
