"""Where the whole wall time of `dlprobe run` goes, against plain python, phase by phase (issue 25).

Runs the loader-bound script of probe_overhead.py (2 and 8 workers by default) plain and probed, alternating, and
times each run from the benchmark's launch to the command's return: start-up (to the script's first line), the
script (first to last line), its exit (to its last atexit hook, the workers shut down), then everything after:
the supervisor noticing, the workers and samplers stopped, py-spy, the output pumps, the hang guard, result.json,
the analysis, report.json, report.html, trace.json, the speedscope file, the plot process, the summary, and the
interpreter's exit. The probed run goes through benchmarks/_timeline_run.py, which stamps each phase's end without
changing dlprobe. memory.png is drawn after `dlprobe run` returns; its lag is shown on a line of its own.
Prints medians per phase (seconds) and the wall ratio; writes benchmarks/out/wall_timeline.json.
--baseline DIR (e.g. `git archive main | tar -x -C DIR`) probes with that checkout too, in the same rounds.
Usage: python benchmarks/wall_timeline.py [--rounds 5] [--workers 2,8] [--summary] [--baseline DIR]
    [--scale 1 (the ~5 s script of probe_overhead.py; ~2 s on a fast 2-core machine, where 2.5 gives ~5 s; 12: ~60 s)]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric
from probe_overhead import LOADER_SCRIPT, SETUPS, wait_for_plot

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

# The script stamps its first and last lines, and its last atexit hook (registered first, so it runs after the
# DataLoader's and multiprocessing's own hooks have shut the workers down).
PRELUDE = """import time as _t, atexit as _a
print("t_script_start", _t.time(), flush=True)
_a.register(lambda: print("t_script_atexit", _t.time(), flush=True))
"""
EPILOGUE = """
if __name__ == "__main__":
    print("t_script_end", _t.time(), flush=True)
"""

# (label, stamp that ends it) for the probed run after the target's last atexit hook, in order; a stamp that is
# missing (e.g. no plot) leaves its phase out.
AFTER_EXIT = (
    ("supervisor notices the exit", "supervisor noticed the exit"),
    ("workers gone, sampler closed", "workers gone, sampler closed"),
    ("py-spy stopped", "py-spy stopped"),
    ("output pumps joined", "output pumps joined start"),
    ("hang guard finish (kernel log)", "hang guard finished"),
    ("result.json written", "result.json written"),
    ("analysis (report_for)", "analysis (report_for)"),
    ("report.json written", "report.json written"),
    ("report.html written", "report.html written"),
    ("trace.json written", "trace.json written"),
    ("speedscope written", "speedscope written"),
    ("plot process started", "plot process started"),
    ("summary printed", "summary printed"),
    ("outputs done", "outputs done"),
    ("dlprobe's last atexit", "dlprobe atexit"),
)


# Modules the probed runs imported after noticing the target's exit (their import is paid after the script).
LATE_IMPORTS: dict[str, set[str]] = {}


def launch(cmd: list[str], env: dict[str, str]) -> tuple[str, float, float]:
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return proc.stdout, start, end


def script_phases(stdout: str, start: float) -> dict[str, float]:
    first, last, atexit = (parse_metric(stdout, f"t_script_{name}") for name in ("start", "end", "atexit"))
    return {"start-up": first - start, "script": last - first, "script's exit": atexit - last}


def probed_round(
    args: list[str], run_dir: Path, env: dict[str, str], quiet: bool = True, side: str = "probed"
) -> dict[str, float]:
    stamps_path = run_dir.with_suffix(".timeline.jsonl")
    flags = ["--quiet"] if quiet else []  # without it: the summary is printed (to a pipe here, as in CI)
    cmd = [PYTHON, str(HERE / "_timeline_run.py"), "run", *flags, "--out", str(run_dir), *args]
    stdout, start, end = launch(cmd, {**env, "DLPROBE_TIMELINE": str(stamps_path)})
    stamps: dict[str, float] = {}
    cpu: dict[str, float] = {}
    late: list[str] = []
    for line in stamps_path.read_text().splitlines():
        row = json.loads(line)
        if "late_imports" in row:
            late = row["late_imports"]
            continue
        stamps.setdefault(row["phase"], row["t"])  # the first of each (run_html_problem, say, is called once)
        cpu.setdefault(row["phase"], row["cpu"])
    phases = script_phases(stdout, start)
    phases["(python up)"] = stamps["dlprobe start"] - start
    phases["(target started)"] = stamps["target started"] - start
    previous = parse_metric(stdout, "t_script_atexit")
    previous_cpu = cpu["supervisor noticed the exit"]
    for label, key in AFTER_EXIT:
        if key in stamps:
            phases[label] = stamps[key] - previous
            phases[f"cpu: {label}"] = cpu[key] - previous_cpu
            previous, previous_cpu = stamps[key], cpu[key]
    # Whether the exit was noticed at once: the exit wait sleeps on the target's pidfd, so a long last wait means
    # the target itself took that long to finish (its interpreter's teardown), a short one a busy last tick.
    phases["last exit wait"] = stamps["supervisor noticed the exit"] - stamps["last exit wait began"]
    phases["supervisor CPU, whole run"] = cpu["dlprobe atexit"]
    if "report's modules preloaded" in cpu:  # a baseline checkout without the preload leaves these out
        phases["supervisor CPU, start to preloaded"] = cpu["report's modules preloaded"]
        # Its sampling while the target runs (the part of the probe's in-run cost the supervisor itself pays)
        phases["supervisor CPU, preloaded to exit"] = (
            cpu["supervisor noticed the exit"] - cpu["report's modules preloaded"]
        )
    stacks_meta = run_dir / "stacks.json"  # py-spy's own CPU over its bursts (absent: the loop never starved)
    phases["py-spy CPU"] = json.loads(stacks_meta.read_text()).get("cpu_s", 0.0) if stacks_meta.exists() else 0.0
    phases["supervisor CPU, noticed to atexit"] = cpu["dlprobe atexit"] - cpu["supervisor noticed the exit"]
    phases["interpreter exit"] = end - previous
    phases["after the script's exit"] = end - parse_metric(stdout, "t_script_atexit")
    phases["total"] = end - start
    phases["throughput"] = parse_metric(stdout, "throughput")
    phases["memory.png after return"] = wait_for_plot(run_dir)
    LATE_IMPORTS.setdefault(side, set()).update(late)
    return phases


def plain_round(args: list[str], env: dict[str, str]) -> dict[str, float]:
    stdout, start, end = launch([PYTHON, *args], env)
    phases = script_phases(stdout, start)
    phases["after the script's exit"] = end - parse_metric(stdout, "t_script_atexit")
    phases["total"] = end - start
    phases["throughput"] = parse_metric(stdout, "throughput")
    return phases


def scenario(
    workers: int,
    rounds: int,
    tmp: Path,
    scale: float,
    env: dict[str, str],
    quiet: bool = True,
    baseline: Path | None = None,
) -> dict[str, object]:
    """Plain, probed (and probed by the baseline checkout) in turn, each round; medians per phase and of the ratios."""
    batches, work = SETUPS.get(workers, (300, 4))
    args = [str(tmp / "loader_bound.py"), str(workers), str(int(batches * scale)), str(work)]
    sides: dict[str, list[dict[str, float]]] = {"plain": [], "probed": [], **({"baseline": []} if baseline else {})}
    for i in range(rounds + 1):
        plain = plain_round(args, env)
        probed = probed_round(args, tmp / f"w{workers}-{i}", env, quiet)
        if baseline is not None:  # the other checkout first on the path, for the supervisor and the target alike
            base_env = {**env, "PYTHONPATH": str(baseline)}
            base = probed_round(args, tmp / f"w{workers}-{i}-baseline", base_env, quiet, "baseline")
            sides["baseline"].append(base)
        sides["plain"].append(plain)
        sides["probed"].append(probed)
    for rows in sides.values():
        del rows[0]  # the warm-up round: bytecode written, files cached

    def med(rows: list[dict[str, float]]) -> dict[str, float]:
        return {key: median([r[key] for r in rows if key in r]) for key in rows[-1]}

    result: dict[str, object] = {side: med(rows) for side, rows in sides.items()}
    for side in ("probed", "baseline"):
        if side in sides:
            ratios = [p["total"] / q["total"] for p, q in zip(sides[side], sides["plain"], strict=True)]
            result[f"{side}_wall_ratio"], result[f"{side}_wall_ratios"] = median(ratios), ratios
    return result


def print_scenario(workers: int, result: dict[str, object]) -> None:
    for side in ("probed", "baseline"):
        if side in result:
            print_side(workers, side, result)


def print_side(workers: int, side: str, result: dict[str, object]) -> None:
    plain: dict[str, float] = result["plain"]  # type: ignore[assignment]
    probed: dict[str, float] = result[side]  # type: ignore[assignment]
    ratios: list[float] = result[f"{side}_wall_ratios"]  # type: ignore[assignment]
    which = "this checkout" if side == "probed" else "the baseline checkout"
    print(f"\n{workers} workers, probed by {which}: medians, seconds (each phase's median on its own; they need not "
          "add up exactly)")  # fmt: skip
    print(f"{'phase':34s} {'plain':>8s} {'probed':>8s} {'extra':>8s}")
    for key in ("start-up", "script", "script's exit", "after the script's exit", "total"):
        print(f"{key:34s} {plain[key]:8.3f} {probed[key]:8.3f} {probed[key] - plain[key]:+8.3f}")
    print("probed, after the script's last atexit hook (wall; the supervisor's CPU in that phase):")
    for key in [label for label, _ in AFTER_EXIT] + ["interpreter exit"]:
        if key in probed:
            used = probed.get(f"cpu: {key}")
            print(f"  {key:32s} {'':8s} {probed[key]:8.3f}" + (f"  ({used:.3f} CPU)" if used is not None else ""))
    print(f"the supervisor's last exit wait (sleeping until the target's exit): {probed['last exit wait']:.3f} s")
    print(f"supervisor CPU: {probed['supervisor CPU, whole run']:.3f} s in all: "
          f"{probed.get('supervisor CPU, start to preloaded', float('nan')):.3f} s starting (its imports and the "
          f"report's), {probed.get('supervisor CPU, preloaded to exit', float('nan')):.3f} s sampling while the target "
          f"ran, {probed['supervisor CPU, noticed to atexit']:.3f} s after noticing the exit; "
          f"py-spy {probed['py-spy CPU']:.3f} s")  # fmt: skip
    print(f"probed start-up: python up {probed['(python up)']:.3f} s, target "
          f"started {probed['(target started)']:.3f} s")  # fmt: skip
    print(f"throughput ratio {probed['throughput'] / plain['throughput']:.3f}; memory.png "
          f"{probed['memory.png after return']:.2f} s after dlprobe returned")  # fmt: skip
    print(f"wall ratio (median of rounds) {result[f'{side}_wall_ratio']:.3f}  [{', '.join(f'{r:.3f}' for r in ratios)}]"
          "   (target <= 1.05 on ~5 s, <= 1.02 on ~60 s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="2,8", help="comma-separated worker counts")
    parser.add_argument("--scale", type=float, default=1.0, help="batches x this (12: a ~60 s plain run)")
    parser.add_argument("--summary", action="store_true", help="probe without --quiet: the summary is printed")
    parser.add_argument("--baseline", type=Path, help="another dlprobe checkout probed in the same rounds")
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f} at start")
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as after pip install
    results: dict[int, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "loader_bound.py").write_text(PRELUDE + LOADER_SCRIPT + EPILOGUE)
        for workers in (int(w) for w in args.workers.split(",")):
            results[workers] = scenario(
                workers, args.rounds, tmp, args.scale, env, not args.summary, args.baseline and args.baseline.resolve()
            )
            print_scenario(workers, results[workers])
    for side, late in LATE_IMPORTS.items():
        print(f"\n{side}: imported after the target's exit: {', '.join(sorted(late)) or 'nothing'}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    OUT.mkdir(exist_ok=True)
    name = ("wall_timeline" if args.scale == 1.0 else f"wall_timeline_x{args.scale:g}") + ("_summary" * args.summary)
    (OUT / f"{name}.json").write_text(json.dumps({"machine": machine(), "scale": args.scale, "results": results}))
    print(f"wrote {OUT / f'{name}.json'}")


if __name__ == "__main__":
    main()
