"""How long after a worker hangs `dlprobe run` has the stacks saved: target <= hang-timeout + 2 s.

Runs tests/scripts/faulty_worker.py in its `hang` mode (sample 13 blocks on a pipe forever) under
`dlprobe run --hang-timeout T --on-hang stop` and measures, from the run's own records, the time from the moment
the training loop started waiting for the stuck batch until hangs/hang-1.json (with every process's stacks and
state) was written.
Usage: python benchmarks/hang_latency.py [--rounds N] [--timeout T]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import PYTHON, machine, median, run

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "scripts" / "faulty_worker.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    latencies = []
    with tempfile.TemporaryDirectory() as tmp_name:
        for i in range(args.rounds):
            run_dir = Path(tmp_name) / f"r{i}"
            cmd = [PYTHON, "-m", "dlprobe", "run", "--quiet", "--hang-timeout", str(args.timeout), "--on-hang",
                   "stop", "--out", str(run_dir), str(SCRIPT), "hang"]  # fmt: skip
            try:
                run(cmd)
            except SystemExit:  # noqa: S110 - the stopped script exits non-zero; that is the point
                pass
            record_file = run_dir / "hangs" / "hang-1.json"
            record = json.loads(record_file.read_text())
            wait_started = record["t"] - record["waited_s"]
            latencies.append(record_file.stat().st_mtime - wait_started)
    extra = [lat - args.timeout for lat in latencies]
    print(f"hang-timeout {args.timeout:g} s, {args.rounds} rounds")
    print(f"stacks saved after   median {median(latencies):.2f} s, worst {max(latencies):.2f} s")
    print(f"beyond the timeout   median {median(extra):.2f} s, worst {max(extra):.2f} s   (target <= 2 s)")


if __name__ == "__main__":
    main()
