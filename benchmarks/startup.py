"""Start-up cost: `dlprobe --help`, and `dlprobe run` on a trivial script against plain python.

Targets: `--help` <= 0.3 s; `dlprobe run` at most 0.3 s slower than python on a trivial script (issues 15, 25).
Bytecode: by default every command runs with its bytecode cached (PYTHONDONTWRITEBYTECODE dropped from the
environment, and one warm-up round not counted), as after `pip install`; `--bytecode environment` keeps the
environment as it is (with PYTHONDONTWRITEBYTECODE=1 and no __pycache__ in a checkout, every dlprobe module is
compiled on every run) and says which it was. `--baseline DIR` alternates with another checkout of dlprobe (e.g.
`git archive main | tar -x -C DIR`), run from DIR, so before and after are measured side by side.
Usage: python benchmarks/startup.py [--rounds N] [--bytecode cached|environment] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, median

REPO = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the command and the children it waited for (less sensitive to a busy
    machine than wall time; dlprobe run's detached plot process is not counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def bytecode_state(env: dict[str, str], tree: Path) -> str:
    cached = any(tree.glob("dlprobe/**/__pycache__/*.pyc"))
    writes = "not written (PYTHONDONTWRITEBYTECODE set)" if env.get("PYTHONDONTWRITEBYTECODE") else "written"
    return f"bytecode {writes}; {'some' if cached else 'no'} __pycache__ in {tree}/dlprobe before the runs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--bytecode", choices=("cached", "environment"), default="cached")
    parser.add_argument("--baseline", type=Path, help="another dlprobe checkout to alternate with")
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f} at start")
    env = dict(os.environ)
    if args.bytecode == "cached":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    trees = {"this": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    for name, tree in trees.items():
        print(f"{name}: {bytecode_state(env, tree)}")
    times: dict[str, list[tuple[float, float]]] = {"plain": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "trivial.py"
        script.write_text("print('hello')\n")
        warm_up = 1 if args.bytecode == "cached" else 0
        for i in range(args.rounds + warm_up):
            counted = i >= warm_up
            for name, tree in trees.items():
                # Each tree runs from its own directory with itself first on the path (python -m finds it there)
                tree_env = {**env, "PYTHONPATH": str(tree)}
                run_dir = tmp / f"{name}-{i}"
                helped = timed([PYTHON, "-m", "dlprobe", "--help"], tree_env, tree)
                probed = timed([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir), str(script)],
                               tree_env, tree)  # fmt: skip
                plain = timed([PYTHON, str(script)], env, tmp)
                if counted:
                    times.setdefault(f"{name} help", []).append(helped)
                    times.setdefault(f"{name} run", []).append(probed)
                    times["plain"].append(plain)

    def wall(key: str) -> float:
        return median([w for w, _ in times[key]])

    def cpu(key: str) -> float:
        return median([c for _, c in times[key]])

    plain = wall("plain")
    print(f"{args.rounds} rounds, alternating; load average {os.getloadavg()[0]:.1f} at the end; wall (CPU) medians")
    print(f"python trivial.py                 {plain:.3f} s ({cpu('plain'):.3f} s)")
    for name in trees:
        run_s, help_s = wall(f"{name} run"), wall(f"{name} help")
        print(f"[{name}] dlprobe --help          {help_s:.3f} s ({cpu(f'{name} help'):.3f} s)   (target <= 0.3 s)")
        print(f"[{name}] dlprobe run trivial.py  {run_s:.3f} s ({cpu(f'{name} run'):.3f} s)")
        print(f"[{name}] difference              {run_s - plain:+.3f} s ({cpu(f'{name} run') - cpu('plain'):+.3f} s)"
              "   (target <= +0.3 s)")  # fmt: skip


if __name__ == "__main__":
    main()
