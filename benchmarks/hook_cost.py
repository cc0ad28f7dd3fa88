"""The in-process hooks' cost per batch: the same loop with and without dlprobe's bootstrap, in microseconds.

A DataLoader with num_workers=0 over a trivial dataset (batch_size=1, identity collate) makes the loader's
own work as small as it gets, so the hooks (wrapped __next__, the in-flight slot, the wait recorded per batch,
a chunked write every 0.25 s) are as large a share as they can ever be. Plain and hooked runs alternate; each
run's best of 3 passes is kept and the medians compared.
Target: a small fixed number of microseconds per batch (issue 15).
Usage: python benchmarks/hook_cost.py [--rounds N] [--batches N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric, run

SCRIPT = """
import sys, time
from torch.utils.data import DataLoader

batches = int(sys.argv[1])
loader = DataLoader(list(range(batches)), batch_size=1, num_workers=0, collate_fn=lambda x: x)
best = float("inf")
for _ in range(3):
    start = time.perf_counter()
    for _batch in loader:
        pass
    best = min(best, time.perf_counter() - start)
print("us_per_batch", best / batches * 1e6)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=50_000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    plain, hooked = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "loop.py"
        script.write_text(SCRIPT)
        for i in range(args.rounds):
            proc, _ = run([PYTHON, str(script), str(args.batches)])
            plain.append(parse_metric(proc.stdout, "us_per_batch"))
            run_dir = tmp / f"run{i}"
            run_dir.mkdir()
            os.environ["DLPROBE_RUN_DIR"] = str(run_dir)
            try:
                cmd = [PYTHON, "-m", "dlprobe.in_training.bootstrap", str(script), str(args.batches)]
                proc, _ = run(cmd)
            finally:
                del os.environ["DLPROBE_RUN_DIR"]
            hooked.append(parse_metric(proc.stdout, "us_per_batch"))
    print(f"plain loop    median {median(plain):6.2f} us/batch (num_workers=0, trivial dataset)")
    print(f"hooked loop   median {median(hooked):6.2f} us/batch")
    print(f"hooks' cost   median {median([h - p for h, p in zip(hooked, plain, strict=True)]):6.2f} us/batch")


if __name__ == "__main__":
    main()
