"""Runs a named subset of the integration tests on each torch x Python x start method, each in its own venv.

Every combination gets a venv of its own under the cache folder (benchmarks/out/compat/py<X.Y>-torch<V>, git-ignored),
with `torch==V` and `-e '.[test]'` installed by pip, then runs SUBSET there; the tests in PER_METHOD run again with
$DLPROBE_TEST_START_METHOD set (tests/start_method/sitecustomize.py makes it the default start method of every process
of the run, as Python 3.14 makes forkserver the default). A combination pip has no torch wheel for is a row that says
so. Writes a markdown table (one row per combination and start method) to stdout and to --out.

Usage: python benchmarks/compat_matrix.py [--torch 2.15.0] [--python 3.11] [--start-method fork] [--out FILE]
       python benchmarks/compat_matrix.py --only 2.15.0/3.11          (one combination)
       python benchmarks/compat_matrix.py --collect                   (the table of every run in the cache)
       python benchmarks/compat_matrix.py --here --start-method forkserver  (this interpreter and its torch, no venv)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / "out" / "compat"
START_METHOD_SITE = ROOT / "tests" / "start_method"
TORCH_VERSIONS = ["2.13.0", "2.14.1", "2.15.0"]
PYTHON_VERSIONS = ["3.10", "3.11", "3.12", "3.13"]
START_METHODS = ["fork", "spawn", "forkserver"]

# What the probe must get right on every torch and Python: its frames never in the user's output, a leaky loader's
# copy-on-write growth, a hang, a killed worker (also when the script's error does not name it, and its death during
# the probe's own bookkeeping), a bad sample, scan, tune, a torchrun job, check.
_FAILURES = "tests/integration/test_run_failures.py::"
_MEMORY = "tests/integration/test_run_memory.py::"
_READINESS = "tests/integration/test_start_readiness.py::"
PER_METHOD = [
    "tests/integration/test_run_probe_truth.py",
    _FAILURES + "test_blocked_sample_is_a_worker_hang_with_the_users_frame",
    _FAILURES + "test_segfault_on_a_sample_is_a_killed_worker_with_the_index",
    _FAILURES + "test_a_crash_the_scripts_error_does_not_name_is_a_killed_worker_from_its_own_record",
    _FAILURES + "test_exception_on_a_sample_is_a_bad_sample_with_the_index",
    "tests/integration/test_worker_death_during_recording.py",
    "tests/integration/test_scan.py::test_planted_bad_samples_are_found_exactly_and_the_exclude_file_lets_training_finish",
    "tests/integration/test_tune.py::test_small_dataset_with_custom_batch_sampler_and_collate_fn",
    "tests/integration/test_launchers.py::test_torchrun_two_ranks_each_with_workers",
    "tests/integration/test_check.py::test_hang_timeout_stops_a_hung_loader_and_fails",
    # What breaks before the workers start: worker-start-failed naming a lambda or a missing main guard (the runs pick
    # spawn or forkserver with --start-method), compare, tune's trials under forkserver; readiness naming the lambda
    # as forkserver's workers fail on it.
    "tests/integration/test_start_method.py",
    _READINESS + "test_the_same_lambda_with_forkserver_forced_is_named_as_its_workers_fail",
]
# Copy-on-write only exists under fork (the default start method on Linux before Python 3.14), and these tests pick
# their loader's start method themselves: run once, with the default.
FORK_ONLY = [
    _MEMORY + "test_leaky_list_dataset_reports_cow_growth_naming_the_attribute",
    _MEMORY + "test_spawn_loader_is_seen_with_its_workers_and_reports_the_copy",
    _MEMORY + "test_forkserver_workers_are_found_as_grandchildren",
    # What a run under fork predicts before forkserver breaks it (a lambda, a loop without a main guard): under spawn
    # or forkserver these scripts fail as predicted, which the per-method readiness test checks. The healthy loader's
    # "no finding" holds under fork only: with forkserver forced (2.13.0/3.12, load 6-8) its workers took 7.8 s to
    # start in each of 2 epochs, and `start-method` rightly says so (fork would start them at once).
    _READINESS + "test_a_lambda_under_the_default_fork_is_named_before_forkserver_breaks_on_it",
    _READINESS + "test_a_loop_without_a_main_guard_is_named_with_its_line",
    _READINESS + "test_a_guarded_healthy_loader_gets_one_line_and_no_finding",
]
SUBSET = PER_METHOD + FORK_ONLY
# Scripts that cannot run under spawn or forkserver at all, with or without dlprobe: their dataset holds a local
# function, which pickle refuses ("Can't pickle local object 'hf_dataset.<locals>.transform'").
NOT_PICKLABLE = ["tests/integration/test_run_probe_truth.py::test_batched_fetch_names_the_index_that_raised[hf]"]


@dataclass
class Row:
    torch: str
    python: str
    method: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""
    failures: list[str] = field(default_factory=list)


def pyenv_python(version: str) -> Path | None:
    """The newest pyenv build of `version` (3.11 -> ~/.pyenv/versions/3.11.7/bin/python), or python3.X on PATH."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(versions.glob(f"{version}.*"), key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()])
    if found and (found[-1] / "bin" / "python").exists():
        return found[-1] / "bin" / "python"
    on_path = shutil.which(f"python{version}")
    return Path(on_path) if on_path else None


def ensure_venv(torch: str, python: str, cache: Path) -> tuple[Path | None, str]:
    """The venv's python with torch==`torch` and dlprobe's test extras, made once; or None and why not."""
    venv = cache / f"py{python}-torch{torch}"
    done = venv / ".installed"
    if done.exists():
        return venv / "bin" / "python", ""
    base = pyenv_python(python)
    if base is None:
        return None, f"no Python {python} here"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    # torch first and alone: its absence for this Python is a row that says so, not an install error in the middle.
    proc = subprocess.run([*pip, f"torch=={torch}"], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        missing = "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr
        return None, "no torch wheel for this Python" if missing else f"pip failed: {proc.stderr.strip()[-300:]}"
    proc = subprocess.run([*pip, "-e", f"{ROOT}[test]"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"pip failed: {proc.stderr.strip()[-300:]}"
    done.write_text(f"torch=={torch} python={python}\n")
    return venv / "bin" / "python", ""


def _default_sigint() -> None:
    """A matrix started in the background (`... &`, nohup, CI) inherits SIGINT ignored, and python then raises no
    KeyboardInterrupt: the tests of Ctrl-C need the default back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_subset(python: Path, tests: list[str], method: str, report: Path, timeout: float, here: bool = False) -> Row:
    """pytest in the venv (one test at a time: the matrix shares the machine), counted from its junit XML. `here`:
    this interpreter, keeping its PYTHONPATH (a worktree's checkout) behind the start-method site."""
    path = [str(START_METHOD_SITE)] + ([os.environ["PYTHONPATH"]] if here and os.environ.get("PYTHONPATH") else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "DLPROBE_TEST_START_METHOD": method}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"  # torchrun, dlprobe of this venv
    cmd = [str(python), "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *tests]
    if method != "fork":
        cmd += [f"--deselect={test}" for test in NOT_PICKLABLE]
    start = time.monotonic()
    report.unlink(missing_ok=True)
    row = Row(torch="", python="", method=method)
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=_default_sigint
        )
    except subprocess.TimeoutExpired:
        row.note = f"timed out after {timeout:.0f} s"
    else:
        (report.with_suffix(".log")).write_text(proc.stdout + proc.stderr)
    row.seconds = time.monotonic() - start
    if report.exists():
        count_report(row, report)
    elif not row.note:
        row.note = "pytest wrote no report"
    return row


def count_report(row: Row, report: Path) -> None:
    """passed / failed / skipped and the failures' names from pytest's junit XML."""
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            if case.find("failure") is not None or case.find("error") is not None:
                row.failed += 1
                row.failures.append(name)
            elif case.find("skipped") is not None:
                row.skipped += 1
            else:
                row.passed += 1


def collected(cache: Path) -> list[Row]:
    """The rows of every run the cache holds (py3.11-torch2.15.0-fork.xml ...), in matrix order: one table from
    several invocations, e.g. combinations run side by side."""
    rows = []
    for torch in TORCH_VERSIONS:
        for python in PYTHON_VERSIONS:
            for method in START_METHODS:
                report = cache / f"py{python}-torch{torch}-{method}.xml"
                if not report.exists():
                    continue
                row = Row(torch, python, method)
                count_report(row, report)
                suite = next(ET.parse(report).getroot().iter("testsuite"), None)
                row.seconds = float(suite.get("time", 0)) if suite is not None else 0.0
                rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| torch | Python | start method | passed | failed | skipped | time (s) | note |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        counts = (
            f"{r.passed} | {r.failed} | {r.skipped} | {r.seconds:.0f}" if not r.note or r.seconds else "- | - | - | -"
        )
        lines.append(f"| {r.torch} | {r.python} | {r.method} | {counts} | {r.note} |")
    failing = [f"- torch {r.torch}, Python {r.python}, {r.method}: {name}" for r in rows for name in r.failures]
    return "\n".join(lines + ([""] + ["Failed:"] + failing if failing else [])) + "\n"


def run_here(args: argparse.Namespace) -> None:
    """The subset with this interpreter, for each start method asked: no venv, no install (e.g. a worktree's own
    checkout on PYTHONPATH)."""
    import torch  # noqa: PLC0415 - only this mode needs the torch it runs

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for method in args.start_method or START_METHODS:
        tests = SUBSET if method == "fork" else PER_METHOD
        report = args.cache / f"here-py{python}-torch{torch.__version__}-{method}.xml"
        row = run_subset(Path(sys.executable), tests, method, report, args.timeout, here=True)
        row.torch, row.python = torch.__version__, python
        rows.append(row)
    text = table(rows)
    (args.out or args.cache / "matrix-here.md").write_text(text)
    print(text, end="")
    sys.exit(1 if any(r.failed or (r.note and r.seconds) for r in rows) else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="append", choices=TORCH_VERSIONS, help="torch version (repeatable)")
    parser.add_argument("--python", action="append", choices=PYTHON_VERSIONS, help="Python version (repeatable)")
    parser.add_argument("--start-method", action="append", choices=START_METHODS, help="(repeatable)")
    parser.add_argument("--only", action="append", metavar="TORCH/PYTHON", help="one combination, e.g. 2.15.0/3.11")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the venvs live (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="the table's file (default: CACHE/matrix.md)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per combination and start method")
    parser.add_argument("--list", action="store_true", help="print the subset and exit")
    parser.add_argument("--collect", action="store_true", help="only the table of every run the cache holds")
    parser.add_argument("--here", action="store_true", help="this interpreter and its torch, no venv or install")
    args = parser.parse_args()
    if args.collect:
        text = table(collected(args.cache))
        (args.out or args.cache / "matrix.md").write_text(text)
        print(text, end="")
        return
    if args.list:
        print("\n".join(f"{t}  ({'fork only' if t in FORK_ONLY else 'every start method'})" for t in SUBSET))
        return
    if args.here:
        run_here(args)
        return
    if args.only:
        combos = [tuple(c.split("/", 1)) for c in args.only]
    else:
        combos = [(t, p) for t in args.torch or TORCH_VERSIONS for p in args.python or PYTHON_VERSIONS]
    methods = args.start_method or START_METHODS
    args.cache.mkdir(parents=True, exist_ok=True)
    out = args.out or args.cache / "matrix.md"
    rows: list[Row] = []
    for torch, python in combos:
        venv_python, why_not = ensure_venv(torch, python, args.cache)
        for method in methods:
            if venv_python is None:
                rows.append(Row(torch, python, method, note=why_not))
                break
            tests = SUBSET if method == "fork" else PER_METHOD
            report = args.cache / f"py{python}-torch{torch}-{method}.xml"
            row = run_subset(venv_python, tests, method, report, args.timeout)
            row.torch, row.python = torch, python
            rows.append(row)
            print(f"torch {torch} Python {python} {method}: {row.passed} passed, {row.failed} failed, "
                  f"{row.skipped} skipped in {row.seconds:.0f} s {row.note}", file=sys.stderr, flush=True)  # fmt: skip
            out.write_text(table(rows))
    text = table(rows)
    out.write_text(text)
    print(text, end="")
    sys.exit(1 if any(r.failed or (r.note and r.seconds) for r in rows) else 0)


if __name__ == "__main__":
    main()
