"""How often `dlprobe check` cries wolf, and how often it catches a regression, on this machine.

The README's recipe as CI runs it: sample_configs/ci-strict.toml copied to dlprobe.toml, its baseline made once with
`--update-baseline` from a run of the healthy numpy loader (tests/scripts/numpy_dataset.py), then N checks of the same
healthy loader (each failure is a false alarm) and N of the regressed one (tests/scripts/leaky_list_dataset.py: the
same data as a list of dicts, about 230 MiB of Python objects in the parent, +120 MiB per worker in 300 batches; each
exit 1 is a detection). With --busy two loops keep both cores busy beside every run, as on a shared CI runner.

Besides each run's verdict, every report is checked again under the rule before this change (peak less start of the
worst worker, the job's PSS total with its files' pages, the machine's /dev/shm: the report's `growth`,
`pss_anon_total_peak` and `shm_job_peak` left out of both reports), so the two rules are compared on the same runs.
A run that takes ~20 s: 2N + 1 runs. Not a timed test: the rates are counts of verdicts, not of seconds.
Writes benchmarks/out/check_noise.json.
On a quiet machine the numpy loader is input-bound (the loop waits ~43% of the time), a warning that ci-strict's
fail_on_severity fails on, where a busy machine makes it a note: `--option=--fail-on-severity --option=error` passes
options to every check (the baseline's rules alone are then what is measured).
Usage: python benchmarks/check_noise.py [--runs 5] [--busy] [--option=OPTION ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import PYTHON, machine

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
HEALTHY, REGRESSED = "numpy_dataset.py", "leaky_list_dataset.py"
MiB = 1 << 20


def check(work: Path, script: str, name: str, *extra: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """One `dlprobe check` of a script with the recipe's config: (exit code, check.json, report.json)."""
    out = work / name
    command = [PYTHON, "-m", "dlprobe", "check", "--quiet", "--config", "dlprobe.toml", "--out", str(out), *extra]
    proc = subprocess.run([*command, str(SCRIPTS / script)], cwd=work, capture_output=True, text=True, timeout=900)
    if not (out / "check.json").exists():
        raise SystemExit(f"{name}: no verdict (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.returncode, json.loads((out / "check.json").read_text()), json.loads((out / "report.json").read_text())


def old_rule(report: dict[str, Any]) -> dict[str, Any]:
    """The report as the check before this change read it: no steps, no anonymous total, the machine's /dev/shm."""
    copy = json.loads(json.dumps(report))
    for proc in copy["processes"]:
        proc.pop("growth", None)
    copy["system"].pop("pss_anon_total_peak", None)
    copy["system"].pop("shm_job_peak", None)
    return copy


def failed_rules(config: Any, report: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    from dlprobe.check.rules import evaluate, failed

    return [r.rule for r in failed(evaluate(config, report, baseline=baseline, baseline_path="dlprobe-baseline.json"))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5, help="healthy and regressed checks, each")
    parser.add_argument("--busy", action="store_true", help="keep both cores busy beside every run")
    parser.add_argument("--option", action="append", default=[], help="an option for every check (repeatable)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from dlprobe.check.config import load_config
    from dlprobe.check.metrics import report_metrics

    work = Path(tempfile.mkdtemp(prefix="check-noise-"))
    shutil.copy(ROOT / "sample_configs" / "ci-strict.toml", work / "dlprobe.toml")
    hogs = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(2 if args.busy else 0)]
    results: dict[str, Any] = {"machine": machine(), "busy": args.busy, "runs": args.runs, "options": args.option,
                               "healthy": [], "regressed": []}  # fmt: skip
    try:
        code, verdict, _ = check(work, HEALTHY, "baseline", "--update-baseline", *args.option)
        results["baseline_exit"] = code
        if code != 0:
            raise SystemExit(
                f"the baseline run failed: {[r['rule'] for r in verdict['rules'] if r['status'] == 'fail']}"
            )
        baseline = json.loads((work / "dlprobe-baseline.json").read_text())
        overrides = {"fail_on_severity": o[1]} if (o := args.option[-2:]) and o[0] == "--fail-on-severity" else {}
        config = load_config(str(work / "dlprobe.toml"), overrides)
        for kind, script in (("healthy", HEALTHY), ("regressed", REGRESSED)):
            for i in range(args.runs):
                code, verdict, report = check(work, script, f"{kind}-{i}", *args.option)
                metrics = report_metrics(report)
                row = {
                    "exit": code,
                    "failed": [r["rule"] for r in verdict["rules"] if r["status"] == "fail"],
                    "old_rule_failed": failed_rules(config, old_rule(report), old_rule(baseline)),
                    "worker_uss_growth_mib": round((metrics["worker_uss_growth"] or 0) / MiB, 1),
                    "worker_steady_growth_mib": round((metrics["worker_steady_growth"] or 0) / MiB, 1),
                    "worker_step_mib": round((metrics["worker_step"] or 0) / MiB, 1),
                    "load_avg_1m": (report.get("machine") or {}).get("load_avg_1m"),
                }
                results[kind].append(row)
                print(f"{kind} {i}: exit {code} failed {row['failed']} | old rule failed {row['old_rule_failed']} | "
                      f"growth {row['worker_uss_growth_mib']} MiB, steady {row['worker_steady_growth_mib']} MiB, "
                      f"step {row['worker_step_mib']} MiB, load {row['load_avg_1m']}", flush=True)  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    n = args.runs
    baseline_only = [r for r in results["regressed"] if any(f.startswith("baseline ") for f in r["failed"])]
    summary = {
        "false_alarms": sum(r["exit"] != 0 for r in results["healthy"]),
        "old_rule_false_alarms": sum(bool(r["old_rule_failed"]) for r in results["healthy"]),
        "detected": sum(r["exit"] == 1 for r in results["regressed"]),
        "detected_by_the_baseline": len(baseline_only),
    }
    results["summary"] = summary
    print(
        f"\n{machine()}{', both cores kept busy' if args.busy else ''}; ci-strict.toml {' '.join(args.option)}, "
        "baseline from one healthy run"
    )
    print(f"false alarms: {summary['false_alarms']} of {n} healthy runs "
          f"(the rule before: {summary['old_rule_false_alarms']} of {n})")  # fmt: skip
    print(f"detected: {summary['detected']} of {n} regressed runs "
          f"({summary['detected_by_the_baseline']} of {n} by a baseline rule alone)")  # fmt: skip
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "check_noise.json").write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
