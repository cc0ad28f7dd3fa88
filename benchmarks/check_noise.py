"""How often `dlprobe check` cries wolf, and how often it catches a regression, on this machine.

The README's recipe as CI runs it: a sample config copied to dlprobe.toml (sample_configs/ci-strict.toml unless
--config says), its baseline made once with `--update-baseline` from a run of the healthy numpy loader
(tests/scripts/numpy_dataset.py), then N checks of the same healthy loader (each failure is a false alarm) and N of
each regressed case (each exit 1 is a detection):
- leaky: tests/scripts/leaky_list_dataset.py, the same data as a list of dicts (copy-on-write, ~120 MiB per worker);
  detected where it fails naming cow-growth.
- job300: benchmarks/_regressed_numpy.py job300, the healthy loader with +300 MB held by the main process; detected
  where total_pss fails and its explanation names the main process.
- worker50: each worker allocates +50 MiB gradually over the run; worker50-step: each worker allocates 50 MiB at once,
  mid-run (a buffer kept, not a collection's copy).
A config without a `baseline` key gets `--baseline dlprobe-baseline.json` (the gate is the baseline's).
The runs alternate (healthy, each case, healthy, ...), so the load beside them is alike for every kind, and the
results are written after every run (a run stopped early keeps what it measured). `--load N` runs N busy loops beside
every run, as on a shared CI runner (`--busy`: 2). Besides each run's verdict, every report is checked again under the
rule before the baseline knew its steps (the report's `growth`, `pss_anon_total_peak` and `shm_job_peak` left out of
both reports). A run takes ~20 s. Not a timed test: the rates are counts of verdicts, not of seconds.
Writes benchmarks/out/check_noise.json.
On a quiet machine the numpy loader is input-bound (the loop waits ~43% of the time), a warning that ci-strict's
fail_on_severity fails on, where a busy machine makes it a note: `--option=--fail-on-severity --option=error` passes
options to every check (the baseline's rules alone are then what is measured).
Usage: python benchmarks/check_noise.py [--config sample_configs/X.toml ...] [--case leaky|job300|worker50|
  worker50-step ...] [--healthy-runs 5] [--regressed-runs 5] [--load 2] [--option=OPTION ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import PYTHON, machine

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
HEALTHY = [str(SCRIPTS / "numpy_dataset.py")]
CASES = {
    "leaky": [str(SCRIPTS / "leaky_list_dataset.py")],
    "job300": [str(ROOT / "benchmarks" / "_regressed_numpy.py"), "job300"],
    "worker50": [str(ROOT / "benchmarks" / "_regressed_numpy.py"), "worker50"],
    "worker50-step": [str(ROOT / "benchmarks" / "_regressed_numpy.py"), "worker50-step"],
}
EPOCH_BATCHES = 600  # the loaders' 600,000 items in batches of 1,000
MiB = 1 << 20


def check(work: Path, script: list[str], name: str, extra: list[str]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """One `dlprobe check` of a script with the recipe's config: (exit code, check.json, report.json)."""
    out = work / name
    command = [PYTHON, "-m", "dlprobe", "check", "--quiet", "--config", "dlprobe.toml", "--out", str(out), *extra]
    proc = subprocess.run([*command, *script], cwd=work, capture_output=True, text=True, timeout=1200)
    if not (out / "check.json").exists():
        raise SystemExit(f"{name}: no verdict (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.returncode, json.loads((out / "check.json").read_text()), json.loads((out / "report.json").read_text())


def old_rule(report: dict[str, Any]) -> dict[str, Any]:
    """The report as the check before the steps read it: no steps, no anonymous total, the machine's /dev/shm."""
    copy = json.loads(json.dumps(report))
    for proc in copy["processes"]:
        proc.pop("growth", None)
    copy["system"].pop("pss_anon_total_peak", None)
    copy["system"].pop("shm_job_peak", None)
    return copy


def failed_rules(config: Any, report: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    from dlprobe.check.rules import evaluate, failed

    return [r.rule for r in failed(evaluate(config, report, baseline=baseline, baseline_path="dlprobe-baseline.json"))]


def named(case: str, rows: list[dict[str, Any]]) -> bool:
    """The failure says what the case's regression is: the copy-on-write finding, the main process's PSS, a worker."""
    failures = [r for r in rows if r["status"] == "fail"]
    text = [f"{r['rule']} {r['message']} {r['explanation']}" for r in failures]
    if case == "leaky":
        return any("cow-growth" in t for t in text)
    if case == "job300":
        return any("total_pss" in r["rule"] and "main process" in r["explanation"] for r in failures)
    return any("worker" in r["rule"] for r in failures)


def load_avg() -> float:
    return os.getloadavg()[0]


def run_config(config_path: Path, args: argparse.Namespace, results: dict[str, Any], out_file: Path) -> None:
    from dlprobe.check.config import load_config
    from dlprobe.check.metrics import report_metrics

    work = Path(tempfile.mkdtemp(prefix="check-noise-"))
    shutil.copy(config_path, work / "dlprobe.toml")
    from dlprobe.check.config import tomllib

    toml = tomllib.loads(config_path.read_text())
    extra = [*args.option, *([] if "baseline" in toml else ["--baseline", "dlprobe-baseline.json"])]
    batches = min(int(toml.get("max_batches", EPOCH_BATCHES)), EPOCH_BATCHES)  # leak-hunt: 2000, past the epoch
    entry: dict[str, Any] = {"config": str(config_path.relative_to(ROOT)), "options": extra, "runs": {}}
    results["configs"].append(entry)
    try:
        code, verdict, _ = check(work, HEALTHY, "baseline", [*extra, "--update-baseline"])
        entry["baseline_exit"] = code
        if code != 0:
            entry["baseline_failed"] = [r["rule"] for r in verdict["rules"] if r["status"] == "fail"]
            print(f"{entry['config']}: the baseline run failed: {entry['baseline_failed']}", flush=True)
            return
        baseline = json.loads((work / "dlprobe-baseline.json").read_text())
        overrides = {"fail_on_severity": o[1]} if (o := args.option[-2:]) and o[0] == "--fail-on-severity" else {}
        config = load_config(str(work / "dlprobe.toml"), overrides)
        kinds = [("healthy", HEALTHY, args.healthy_runs)]
        kinds += [(case, [*CASES[case], *([str(batches)] if case != "leaky" else [])], args.regressed_runs)
                  for case in args.case]  # fmt: skip
        for i in range(max(n for _, _, n in kinds)):
            for kind, script, n in kinds:
                if i >= n:
                    continue
                load_before = load_avg()
                started = time.monotonic()
                code, verdict, report = check(work, script, f"{kind}-{i}", extra)
                metrics = report_metrics(report)
                failed = [r for r in verdict["rules"] if r["status"] == "fail"]
                row = {
                    "exit": code,
                    "failed": [r["rule"] for r in failed],
                    "named": kind != "healthy" and named(kind, verdict["rules"]),
                    "why": [f"{r['rule']}: {r['message']} | {r['explanation']}" for r in failed][:4],
                    "old_rule_failed": failed_rules(config, old_rule(report), old_rule(baseline)),
                    "worker_uss_growth_mib": round((metrics["worker_uss_growth"] or 0) / MiB, 1),
                    "worker_steady_growth_mib": round((metrics["worker_steady_growth"] or 0) / MiB, 1),
                    "worker_step_mib": round((metrics["worker_step"] or 0) / MiB, 1),
                    "total_pss_steady_mib": round((metrics["total_pss_steady"] or 0) / MiB, 1),
                    "steps": [s for p in report["processes"] for s in (p.get("growth") or {}).get("steps") or []],
                    "load_avg_1m": (report.get("machine") or {}).get("load_avg_1m"),
                    "load_avg_1m_before": round(load_before, 2),
                    "seconds": round(time.monotonic() - started, 1),
                }
                entry["runs"].setdefault(kind, []).append(row)
                print(f"{entry['config']} {kind} {i}: exit {code} failed {row['failed']} named {row['named']} | "
                      f"old rule failed {row['old_rule_failed']} | growth {row['worker_uss_growth_mib']} MiB, steady "
                      f"{row['worker_steady_growth_mib']} MiB, step {row['worker_step_mib']} MiB, total steady "
                      f"{row['total_pss_steady_mib']} MiB, load {row['load_avg_1m']}, {row['seconds']}s",
                      flush=True)  # fmt: skip
                summarise(entry)
                out_file.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarise(entry: dict[str, Any]) -> None:
    runs = entry["runs"]
    summary: dict[str, Any] = {}
    healthy = runs.get("healthy", [])
    summary["healthy"] = {
        "runs": len(healthy),
        "false_alarms": sum(r["exit"] != 0 for r in healthy),
        "old_rule_false_alarms": sum(bool(r["old_rule_failed"]) for r in healthy),
    }
    for kind, rows in runs.items():
        if kind == "healthy":
            continue
        summary[kind] = {
            "runs": len(rows),
            "detected": sum(r["exit"] == 1 for r in rows),
            "detected_naming_it": sum(r["exit"] == 1 and r["named"] for r in rows),
            "detected_by_the_baseline": sum(any(f.startswith("baseline ") for f in r["failed"]) for r in rows),
        }
    loads = [r["load_avg_1m"] for rows in runs.values() for r in rows if r["load_avg_1m"] is not None]
    summary["load_avg_1m"] = [min(loads), max(loads)] if loads else None
    entry["summary"] = summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", action="append", default=[], help="a sample config (repeatable)")
    parser.add_argument("--case", action="append", default=[], choices=sorted(CASES), help="regressed case(s)")
    parser.add_argument("--healthy-runs", type=int, default=5)
    parser.add_argument("--regressed-runs", type=int, default=5, help="checks of each regressed case")
    parser.add_argument("--runs", type=int, help="healthy and regressed runs, each (sets both)")
    parser.add_argument("--load", type=int, default=0, help="busy loops beside every run")
    parser.add_argument("--busy", action="store_true", help="--load 2: keep both cores busy")
    parser.add_argument("--option", action="append", default=[], help="an option for every check (repeatable)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "check_noise.json"))
    args = parser.parse_args()
    if args.runs is not None:
        args.healthy_runs = args.regressed_runs = args.runs
    args.case = args.case or list(CASES)
    load = max(args.load, 2 if args.busy else 0)
    configs = [Path(c).resolve() for c in args.config] or [ROOT / "sample_configs" / "ci-strict.toml"]
    sys.path.insert(0, str(ROOT))
    out_file = Path(args.out)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    results: dict[str, Any] = {
        "machine": machine(), "commit": commit.stdout.strip(), "load_loops": load, "cases": args.case,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "configs": [],
    }  # fmt: skip
    hogs = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(load)]
    try:
        for config_path in configs:
            run_config(config_path, args, results, out_file)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"\n{machine()}, {load} busy loop(s) beside every run")
    for entry in results["configs"]:
        s = entry.get("summary") or {}
        h = s.get("healthy") or {}
        print(f"{entry['config']}: false alarms {h.get('false_alarms')} of {h.get('runs')} healthy runs (the rule "
              f"before: {h.get('old_rule_false_alarms')}); load average {s.get('load_avg_1m')}")  # fmt: skip
        for case in args.case:
            if c := s.get(case):
                print(f"  {case}: detected {c['detected']} of {c['runs']} ({c['detected_naming_it']} naming it, "
                      f"{c['detected_by_the_baseline']} by a baseline rule)")  # fmt: skip
    out_file.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
