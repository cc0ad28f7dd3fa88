"""The healthy numpy loader (tests/scripts/numpy_dataset.py: its dataset imported, its loop as there) with one
regression that a real one looks like, for benchmarks/check_noise.py's --case. argv[1] names it:
  job300    the training process allocates and touches a 300 MB numpy array before the loop and keeps it
  worker50  each worker allocates and touches 50 MiB on its first sample and keeps it
argv[2]: the number of records (600,000), as numpy_dataset.py's argv[1]."""

import sys
import time
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader, get_worker_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scripts"))
from numpy_dataset import ArrayDataset  # noqa: E402

JOB_BYTES = 300_000_000  # 300 MB
WORKER_BYTES = 50 << 20  # 50 MiB
held: list[np.ndarray] = []  # what the regression keeps, in whichever process allocated it


class WorkerHoldsMore(ArrayDataset):
    """ArrayDataset whose every worker allocates and touches WORKER_BYTES on its first sample and keeps them."""

    def __getitem__(self, i):
        if not held and get_worker_info() is not None:
            held.append(np.ones(WORKER_BYTES, dtype=np.uint8))  # ones: every page written, not left lazy as zeros
        return super().__getitem__(i)


if __name__ == "__main__":
    case = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 600_000
    if case == "job300":
        held.append(np.ones(JOB_BYTES, dtype=np.uint8))
        dataset = ArrayDataset(n)
    elif case == "worker50":
        dataset = WorkerHoldsMore(n)
    else:
        raise SystemExit(f"unknown case {case!r}: job300 or worker50")
    loader = DataLoader(dataset, batch_size=1000, shuffle=True, num_workers=2)
    checksum = 0
    for _x, y in loader:
        checksum += int(y.sum())
        time.sleep(0.004)
    print(f"checksum {checksum} ({case})")
