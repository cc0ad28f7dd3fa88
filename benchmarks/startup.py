"""Start-up cost: `dlprobe --help`, and `dlprobe run` on a trivial script against plain python.

Targets: `--help` <= 0.3 s; `dlprobe run` at most 0.3 s slower than python on a trivial script (issue 15).
Usage: python benchmarks/startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import PYTHON, machine, median, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "trivial.py"
        script.write_text("print('hello')\n")
        help_times, plain, probed = [], [], []
        for i in range(args.rounds):
            help_times.append(run([PYTHON, "-m", "dlprobe", "--help"])[1])
            plain.append(run([PYTHON, str(script)])[1])
            probed.append(run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(tmp / f"r{i}"), str(script)])[1])
    print(f"dlprobe --help           median {median(help_times):.3f} s   (target <= 0.3 s)")
    print(f"python trivial.py        median {median(plain):.3f} s")
    print(f"dlprobe run trivial.py   median {median(probed):.3f} s")
    print(f"difference               median {median(probed) - median(plain):.3f} s   (target <= 0.3 s)")


if __name__ == "__main__":
    main()
