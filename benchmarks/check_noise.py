"""How often `dlprobe check` cries wolf, and how often it catches a regression, on this machine.

The README's recipe as CI runs it: sample_configs/ci-strict.toml copied to dlprobe.toml, its baseline made once with
`--update-baseline` from a run of the healthy numpy loader (tests/scripts/numpy_dataset.py), then N checks of each
case against that one baseline (--case, repeatable; default: healthy and leaky), the cases taken in turn, run by run:
  healthy   the same healthy loader: each failure is a false alarm;
  leaky     tests/scripts/leaky_list_dataset.py: the same data as a list of dicts, about 230 MiB of Python objects in
            the parent, +120 MiB per worker in 300 batches;
  job300    the numpy loader whose training process holds a 300 MB numpy array more, allocated and touched before the
            loop (benchmarks/_regressed_numpy.py): the baseline's total_pss should fail;
  worker50  the numpy loader whose every worker holds 50 MiB more, allocated and touched on its first sample
            (benchmarks/_regressed_numpy.py): a per-worker baseline rule (worker_uss_peak or growth) should fail.
Each exit 1 of a regressed case is a detection; which rules failed is counted per case. With --busy two loops keep
both cores busy beside every run, as on a shared CI runner.

Besides each run's verdict, every report is checked again under the rule before this change (peak less start of the
worst worker, the job's PSS total with its files' pages, the machine's /dev/shm: the report's `growth`,
`pss_anon_total_peak` and `shm_job_peak` left out of both reports), so the two rules are compared on the same runs.
A run that takes ~20 s: N x cases + 1 runs. Not a timed test: the rates are counts of verdicts, not of seconds.
--config NAME takes another of sample_configs/ instead of ci-strict; one that names no baseline (default, hang-hunt,
leak-hunt) has no baseline run, and its checks gate on the config's limits and finding codes alone.
Writes benchmarks/out/check_noise.json (check_noise-NAME.json for another config; again after every run, so a
benchmark stopped early leaves what it measured).
On a quiet machine the numpy loader is input-bound (the loop waits ~43% of the time), a warning that ci-strict's
fail_on_severity fails on, where a busy machine makes it a note: `--option=--fail-on-severity --option=error` passes
options to every check (the baseline's rules alone are then what is measured).
Usage: python benchmarks/check_noise.py [--runs 5] [--busy] [--config ci-strict] [--case healthy --case job300 ...]
       [--option=OPTION ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from _common import PYTHON, machine

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
REGRESSED_NUMPY = ROOT / "benchmarks" / "_regressed_numpy.py"
CONFIGS = ROOT / "sample_configs"
HEALTHY = SCRIPTS / "numpy_dataset.py"
# case -> the script and its arguments; every case but healthy is a regression, each against the healthy baseline
CASES: dict[str, list[str]] = {
    "healthy": [str(HEALTHY)],
    "leaky": [str(SCRIPTS / "leaky_list_dataset.py")],
    "job300": [str(REGRESSED_NUMPY), "job300"],
    "worker50": [str(REGRESSED_NUMPY), "worker50"],
}
DEFAULT_CASES = ["healthy", "leaky"]
FAILURE_KEYS = ("rule", "threshold", "observed", "message", "explanation")  # a failed rule's row in check.json
MiB = 1 << 20


def check(work: Path, script: list[str], name: str, *extra: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """One `dlprobe check` of a script (its path and arguments) with the recipe's config: (exit code, check.json,
    report.json)."""
    out = work / name
    command = [PYTHON, "-m", "dlprobe", "check", "--quiet", "--config", "dlprobe.toml", "--out", str(out), *extra]
    proc = subprocess.run([*command, *script], cwd=work, capture_output=True, text=True, timeout=900)
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


def failed_rules(config: Any, report: dict[str, Any], baseline: dict[str, Any] | None) -> list[str]:
    from dlprobe.check.rules import evaluate, failed

    return [r.rule for r in failed(evaluate(config, report, baseline=baseline, baseline_path="dlprobe-baseline.json"))]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's counts: its runs, its failures (a false alarm in the healthy case, a detection in the others) and
    which rules failed how often."""
    loads = [r["load_avg_1m"] for r in rows if r["load_avg_1m"] is not None]
    return {
        "runs": len(rows),
        "failed": sum(r["exit"] != 0 for r in rows),
        "exit_1": sum(r["exit"] == 1 for r in rows),
        "by_a_baseline_rule": sum(any(f.startswith("baseline ") for f in r["failed"]) for r in rows),
        "rules_failed": dict(Counter(f for r in rows for f in r["failed"]).most_common()),
        "old_rule_failed": sum(bool(r["old_rule_failed"]) for r in rows),
        # the same runs judged by another sample config's rules (--also-config): runs that config would fail
        "also_failed": {name: sum(bool(r["also_failed"].get(name)) for r in rows) for name in rows[0]["also_failed"]}
        if rows
        else {},
        "load_avg_1m": [min(loads), max(loads)] if loads else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5, help="checks of each case")
    parser.add_argument("--busy", action="store_true", help="keep both cores busy beside every run")
    parser.add_argument("--case", action="append", choices=list(CASES), help="a case to check (repeatable; default: "
                        f"{' and '.join(DEFAULT_CASES)}), each against the healthy baseline")  # fmt: skip
    parser.add_argument("--option", action="append", default=[], help="an option for every check (repeatable)")
    parser.add_argument("--config", default="ci-strict", choices=sorted(p.stem for p in CONFIGS.glob("*.toml")),
                        help="the sample config copied to dlprobe.toml (default: ci-strict); one that names no "
                        "baseline is checked by its limits and finding codes alone, with no baseline run")  # fmt: skip
    parser.add_argument(
        "--also-config",
        action="append",
        default=[],
        choices=sorted(p.stem for p in CONFIGS.glob("*.toml")),
        help="judge the same runs by this sample config's rules too (repeatable; no baseline)",
    )
    args = parser.parse_args()
    cases = list(dict.fromkeys(args.case or DEFAULT_CASES))
    sys.path.insert(0, str(ROOT))
    from dlprobe.check.config import load_config
    from dlprobe.check.metrics import report_metrics

    work = Path(tempfile.mkdtemp(prefix="check-noise-"))
    shutil.copy(CONFIGS / f"{args.config}.toml", work / "dlprobe.toml")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    hogs = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(2 if args.busy else 0)]
    results: dict[str, Any] = {"machine": machine(), "busy": args.busy, "runs": args.runs, "options": args.option,
                               "config": args.config, "cases": {case: [] for case in cases}}  # fmt: skip
    name = "check_noise.json" if args.config == "ci-strict" else f"check_noise-{args.config}.json"

    def write() -> None:
        results["summary"] = {case: summarize(rows) for case, rows in results["cases"].items()}
        (out / name).write_text(json.dumps(results, indent=2) + "\n")

    try:
        overrides = {"fail_on_severity": o[1]} if (o := args.option[-2:]) and o[0] == "--fail-on-severity" else {}
        config = load_config(str(work / "dlprobe.toml"), overrides)
        baseline: dict[str, Any] | None = None
        # configs whose runs are the same as this one's (the same script, to its end: no max_batches below its 600
        # batches) are judged from the same reports by their own rules; one with a baseline needs its own runs
        also = {name: load_config(str(CONFIGS / f"{name}.toml"), overrides) for name in args.also_config}
        if any(other.baseline for other in also.values()):
            raise SystemExit("--also-config takes configs without a baseline (it compares no baseline)")
        if config.baseline:
            code, verdict, _ = check(work, CASES["healthy"], "baseline", "--update-baseline", *args.option)
            results["baseline_exit"] = code
            if code != 0:
                raise SystemExit(
                    f"the baseline run failed: {[r['rule'] for r in verdict['rules'] if r['status'] == 'fail']}"
                )
            baseline = json.loads((work / config.baseline).read_text())
            base = report_metrics(baseline)
            keys = ("worker_steady_peak", "worker_steady_growth", "total_pss_steady")
            results["baseline_mib"] = {key: None if (v := base[key]) is None else round(v / MiB, 1) for key in keys}
        # the cases in turn, run by run: a machine whose load changes meanwhile loads every case alike
        for i in range(args.runs):
            for case in cases:
                code, verdict, report = check(work, CASES[case], f"{case}-{i}", *args.option)
                metrics = report_metrics(report)
                failures = [r for r in verdict["rules"] if r["status"] == "fail"]
                row = {
                    "exit": code,
                    "failed": [r["rule"] for r in failures],
                    # a failure's own numbers, as check.json has them: a false alarm says which rule and by how much
                    "failures": [{k: r.get(k) for k in FAILURE_KEYS} for r in failures],
                    "old_rule_failed": failed_rules(config, old_rule(report), baseline and old_rule(baseline)),
                    "also_failed": {name: failed_rules(other, report, None) for name, other in also.items()},
                    "worker_uss_growth_mib": round((metrics["worker_uss_growth"] or 0) / MiB, 1),
                    "worker_steady_growth_mib": round((metrics["worker_steady_growth"] or 0) / MiB, 1),
                    "worker_step_mib": round((metrics["worker_step"] or 0) / MiB, 1),
                    "worker_steady_peak_mib": round((metrics["worker_steady_peak"] or 0) / MiB, 1),
                    "total_pss_steady_mib": round((metrics["total_pss_steady"] or 0) / MiB, 1),
                    "load_avg_1m": (report.get("machine") or {}).get("load_avg_1m"),
                }
                results["cases"][case].append(row)
                write()
                print(f"{case} {i}: exit {code} failed {row['failed']} | old rule failed {row['old_rule_failed']} | "
                      f"growth {row['worker_uss_growth_mib']} MiB, steady {row['worker_steady_growth_mib']} MiB, "
                      f"step {row['worker_step_mib']} MiB, steady peak {row['worker_steady_peak_mib']} MiB, "
                      f"job {row['total_pss_steady_mib']} MiB, load {row['load_avg_1m']}", flush=True)  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    write()
    print(
        f"\n{machine()}{', both cores kept busy' if args.busy else ''}; {args.config}.toml {' '.join(args.option)}, "
        + (f"baseline from one healthy run ({results['baseline_mib']})" if "baseline_mib" in results else "no baseline")
    )
    for case, counts in results["summary"].items():
        n, rules, load = counts["runs"], counts["rules_failed"], counts["load_avg_1m"]
        # a false alarm is any failure of the healthy loader; a detection is exit 1 (3 is the script's own failure)
        what = f"false alarms {counts['failed']}" if case == "healthy" else f"detected {counts['exit_1']}"
        print(f"{case}: {what} of {n} (by a baseline rule: {counts['by_a_baseline_rule']} of {n}; "
              f"the rule before: {counts['old_rule_failed']} of {n}); rules failed: {rules or 'none'}; "
              f"the same runs by {', '.join(f'{c}: {k} failed' for c, k in counts['also_failed'].items()) or '-'}; "
              f"load average {load} at the runs' starts")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
