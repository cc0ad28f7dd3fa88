"""Evaluates a check's rules against a report: each rule's threshold, observed value and pass/fail/skip."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from dlprobe.analysis import WORKER_EXCEPTION_CODES, failure_message, failure_where
from dlprobe.analysis.evidence.finding import SEVERITIES
from dlprobe.analysis.measures.worker_cpu import BUSY_RUNQ_SHARE
from dlprobe.analysis.report.schema import FindingEntry, Report
from dlprobe.check.config import BASELINE_METRICS, CheckConfig
from dlprobe.check.limits import Stop
from dlprobe.check.metrics import (
    METRIC_KINDS,
    PEAKS_WITH_UNSEEN_COPY,
    STEADY_OF,
    copy_estimate,
    format_metric,
    has_steady_total,
    largest_step,
    legacy_total_steady,
    report_metrics,
    report_spreads,
    unseen_copy,
    without_unseen_copies,
)
from dlprobe.units import format_bytes

PASS, FAIL, SKIP = "pass", "fail", "skip"

# config key -> (metric it limits, what the metric is, in words)
THRESHOLD_RULES = {
    "max_worker_uss_growth": ("worker_uss_growth", "per-worker USS growth"),
    "max_worker_uss": ("worker_uss_peak", "peak per-worker USS"),
    "max_total_pss": ("total_pss", "peak PSS of the whole job"),
    "max_shm_peak": ("shm_peak", "peak /dev/shm use"),
    "max_wait_fraction": ("wait_fraction", "share of the loop spent waiting for batches"),
    "max_first_batch_wait": ("first_batch_wait", "wait for the first batch"),
}
# The smallest change a baseline comparison counts: below these, two runs of the same code differ anyway.
NOISE_FLOOR = {
    "worker_uss_growth": 8 * 1024 * 1024,
    "worker_uss_peak": 8 * 1024 * 1024,
    "total_pss": 32 * 1024 * 1024,
    "shm_peak": 8 * 1024 * 1024,
    "wait_fraction": 0.02,
    "first_batch_wait": 0.25,
}
for _metric, _steady in STEADY_OF.items():
    NOISE_FLOOR[_steady] = NOISE_FLOOR[_metric]
# The baseline's rule: how many of its spreads (the standard deviation of a metric across the baseline's workers) a
# metric may rise before it is a regression. For normal noise 4 spreads is a false alarm in about 3 of 100,000
# comparisons; what was measured on a busy 2-core runner is BASELINE_MEASURED (benchmarks/check_noise.py).
SPREADS = 4
BASELINE_RULE = (
    f"fail above baseline + max(margin, {SPREADS} spreads, noise floor), one-time steps apart; "
    "not compared where the spread is above the margin"
)
BASELINE_MEASURED = "false alarms measured: 0 of 30 healthy runs with both cores busy (benchmarks/check_noise.py)"
# The findings that explain a failed memory rule, most telling first.
EXPLAINING = {
    "bytes": ("cow-growth", "spawn-copy", "too-many-workers", "pin-memory", "shm-exhausted", "shm-pressure"),
    "shm": ("shm-exhausted", "shm-pressure"),
}
STOP_WORDS = {"max_batches": "after max_batches", "max_seconds": "at max_seconds", "hang": "for a hang"}


@dataclass
class RuleResult:
    """One row of the check: what was limited, the limit, what was seen, and the verdict."""

    rule: str
    threshold: str
    observed: str
    status: str
    message: str = ""
    source: str = ""
    explanation: str = ""  # a failure's context: the finding that explains it, a one-time step, the machine's load

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def script_failed(report: Report, stop: Stop | None) -> bool:
    """The script ended badly on its own (dlprobe stopping it on purpose is not a failure of the script)."""
    if stop is not None:
        return False
    return report["exit_code"] not in (0, None) or report["signal"] is not None


def _script_rule(report: Report, stop: Stop | None) -> RuleResult:
    code, sig = report["exit_code"], report["signal"]
    batches = sum(lo["batches"] for lo in report["loaders"])
    observed = f"exit {code}" + (f" ({sig})" if sig else "")
    if stop is not None:
        observed = f"stopped {STOP_WORDS.get(stop.reason, stop.reason)} ({batches:,} batches), {observed}"
        return RuleResult("script_exit", "exit 0", observed, PASS, "dlprobe ended the run at its limit")
    if script_failed(report, stop):
        # a worker's exception the script re-raised is told by its worker finding (analysis.fold_script_errors)
        errors = [f for f in report["findings"] if f["code"] in ("script-error", *WORKER_EXCEPTION_CODES)]
        why = errors[0]["title"] if errors else f"the script exited with {observed}"
        return RuleResult("script_exit", "exit 0", observed, FAIL, why)
    return RuleResult("script_exit", "exit 0", f"{observed} ({batches:,} batches)", PASS)


def _threshold_rule(key: str, limit: float, observed: float | None, what: str, metric: str, source: str,
                    raw: str) -> RuleResult:  # fmt: skip
    threshold = f"<= {raw}"
    if observed is None:
        return RuleResult(key, threshold, "-", SKIP, f"nothing measured for the {what}", source)
    shown = format_metric(metric, observed)
    if observed > limit:
        message = f"{what} was {shown}, above the limit {raw}"
        if METRIC_KINDS[metric] == "bytes" and "ib" not in raw.lower():  # "200 MB" is decimal; observed values are MiB
            message += f" ({format_metric(metric, limit)})"
        return RuleResult(key, threshold, shown, FAIL, message, source)
    return RuleResult(key, threshold, shown, PASS, "", source)


def _raw(config: CheckConfig, key: str) -> str:
    return config.raw.get(key) or format_metric(THRESHOLD_RULES.get(key, (key, ""))[0], getattr(config, key))


def _hang_words(stop: Stop, raw: str) -> tuple[str, str, str]:
    """Observed value, status and message of a hang that stopped the run, from what its hang record measured."""
    loader = "a loader" if stop.loader_id is None else f"loader {stop.loader_id}"
    if stop.worker_id is not None:
        loader += f" (waiting on worker {stop.worker_id})"
    if stop.stall_s is None:  # no readable hang record: only the guard's verdict is known, not the stall
        return (f"no batch for over {raw}", FAIL,
                f"{loader} delivered no batch for longer than the limit {raw} (the hang record is missing, so the "
                "stall was not measured); dlprobe stopped the script")  # fmt: skip
    stalled = format_metric("longest_wait", stop.stall_s)
    return (f"no batch for {stalled}", FAIL,
            f"{loader} delivered no batch for {stalled} (limit {raw}); dlprobe stopped the script")  # fmt: skip


def _hang_rule(config: CheckConfig, metrics: dict[str, float | None], stop: Stop | None) -> RuleResult:
    assert config.hang_timeout is not None
    raw = _raw(config, "hang_timeout")
    source = config.sources.get("hang_timeout", "")
    if stop is not None and stop.reason == "hang":
        return RuleResult("hang_timeout", f"< {raw}", *_hang_words(stop, raw), source)
    longest = metrics["longest_wait"]
    if longest is None:
        return RuleResult("hang_timeout", f"< {raw}", "-", SKIP, "no batch was waited for", source)
    shown = format_metric("longest_wait", longest)
    if longest >= config.hang_timeout:
        return RuleResult("hang_timeout", f"< {raw}", f"longest wait {shown}", FAIL,
                          f"one batch took {shown} to arrive (limit {raw})", source)  # fmt: skip
    return RuleResult("hang_timeout", f"< {raw}", f"longest wait {shown}", PASS, "", source)


def _finding_rules(config: CheckConfig, findings: list[FindingEntry]) -> list[RuleResult]:
    rows = []
    source = config.sources.get("fail_on", "default")
    for code in config.fail_on:
        found = [f for f in findings if f["code"] == code]
        if found:
            first = found[0]
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            rows.append(RuleResult(f"fail_on {code}", "absent", f"present ({first['severity']})", FAIL,
                                   f"{first['title']}{more}", source))  # fmt: skip
        else:
            rows.append(RuleResult(f"fail_on {code}", "absent", "absent", PASS, "", source))
    if config.fail_on_severity is not None:
        worst = SEVERITIES.index(config.fail_on_severity)
        found = [f for f in findings if f["severity"] in SEVERITIES[: worst + 1]]
        name = f"fail_on_severity {config.fail_on_severity}"
        threshold = f"no {config.fail_on_severity}" + (" or worse" if worst else "")
        source = config.sources.get("fail_on_severity", "")
        if found:
            codes = ", ".join(dict.fromkeys(f["code"] for f in found))
            rows.append(RuleResult(name, threshold, f"{len(found)}: {codes}", FAIL,
                                   "; ".join(f"{f['code']}: {f['title']}" for f in found), source))  # fmt: skip
        else:
            rows.append(RuleResult(name, threshold, "none", PASS, "", source))
    return rows


def allowed_value(config: CheckConfig, metric: str, base: float, spread: float | None = None,
                  noise_metric: str | None = None) -> tuple[float, str]:  # fmt: skip
    """The largest value that is not a regression against the baseline, and how it was worked out.

    A margin never goes below the metric's measuring noise (NOISE_FLOOR), or a 0.2 s first batch that took
    0.23 s would fail a 10% margin on every other CI run; where the baseline knows its own spread, nor below
    SPREADS of it. `noise_metric` is the metric compared (the steady one), `metric` the one the config names.
    """
    shown_as = noise_metric or metric
    kind, margin = config.baseline_margins.get(metric, ("relative", config.baseline_margin))
    slack = base * margin if kind == "relative" else margin
    how = f"{100 * margin:g}%" if kind == "relative" else format_metric(shown_as, margin)
    floor = NOISE_FLOOR[shown_as]
    if spread is not None:
        spreads = SPREADS * spread
        allowed = max(slack, spreads, floor)
        words = (f"max({how}, {SPREADS} spreads of {format_metric(shown_as, spread)}, "
                 f"{format_metric(shown_as, floor)} floor)")  # fmt: skip
        return base + allowed, f"{format_metric(shown_as, base)} + {words}"
    if slack < floor:
        slack, how = floor, f"{format_metric(shown_as, floor)} noise floor"
    return base + slack, f"{format_metric(shown_as, base)} + {how}"


def _step_words(report: Report) -> str:
    step = largest_step(report)
    if step is None:
        return ""
    proc, entry = step
    at = f" at batch {entry['batch']:,}" if entry.get("batch") is not None else f" at {entry['t']:.1f}s"
    cause = f" ({entry['cause']})" if entry.get("cause") else ""
    return f"one-time step of {format_bytes(int(entry['bytes']))} in worker {proc.get('worker_id')}{at}{cause}"


def busy_words(report: Report) -> str:
    """Whether the machine was busy while the run ran, from the report's facts: the workers' run-queue wait (their
    share of time waiting for a core) and the load average at the start against the usable cores."""
    machine: dict[str, Any] = dict(report.get("machine") or {})
    load, cores = machine.get("load_avg_1m"), machine.get("usable_cores")
    times = [wt for lo in report["loaders"] if (wt := lo.get("worker_time")) is not None]
    runqs = [q for wt in times if (q := wt["runq_share"]) is not None]
    runq = max(runqs) if runqs else None
    facts = []
    if runq is not None:
        facts.append(f"the workers waited for a core {runq:.0%} of the time")
    if load is not None and cores:
        facts.append(f"load average {load:.1f} on {cores} usable core(s) at the start")
    if not facts:
        return ""
    busy = (runq is not None and runq >= BUSY_RUNQ_SHARE) or (load is not None and bool(cores) and load > cores)
    return f"the machine was {'busy' if busy else 'not busy'}: {', '.join(facts)}"


def explanation(report: Report, metric: str) -> str:
    """What explains a failed memory rule: the finding (with its suspect attribute), the step, the machine's load."""
    parts = []
    codes = EXPLAINING["shm" if metric == "shm_peak" else "bytes"] if METRIC_KINDS.get(metric) == "bytes" else ()
    found = next((f for code in codes for f in report["findings"] if f["code"] == code), None)
    if found is not None:
        suspects = [s for s in (found.get("evidence") or {}).get("suspects") or [] if isinstance(s, dict)]
        named = ""
        if suspects and suspects[0].get("attribute"):
            first = suspects[0]
            items = f" of {first['items']:,} items" if isinstance(first.get("items"), int) else ""
            named = f" (suspect: {first['attribute']}, a {first.get('type') or 'container'}{items})"
        parts.append(f"explained by {found['code']}: {found['title']}{named}")
    elif codes:
        parts.append("no finding explains it")
    if metric.startswith("worker_") and (step := _step_words(report)):
        parts.append(step)
    if busy := busy_words(report):
        parts.append(busy)
    return "; ".join(parts)


Metrics = dict[str, float | None]


def _baseline_row(config: CheckConfig, metric: str, metrics: Metrics, base_metrics: Metrics, base_spreads: Metrics,
                  baseline_path: str, report: Report, unseen: str = "") -> RuleResult:  # fmt: skip
    name = f"baseline {metric}"
    steady = STEADY_OF.get(metric)
    compared = steady if steady and base_metrics.get(steady) is not None and metrics.get(steady) is not None else metric
    base, now = base_metrics.get(compared), metrics.get(compared)
    if config.baseline_margins.get(metric, ("", 0.0))[0] == "off":
        return RuleResult(name, "-", format_metric(metric, now), SKIP,
                          f'not compared: {metric} = "off" in [baseline_margins]', baseline_path)  # fmt: skip
    if base is None or now is None:
        missing = "the baseline" if base is None else "this run"
        return RuleResult(name, "-", format_metric(metric, now), SKIP, f"{missing} has no {metric}", baseline_path)
    spread = base_spreads.get(compared)
    shown = format_metric(compared, now)
    if compared != metric:
        step = _step_words(report)
        shown += f" (steps apart: {step}" if step else " (no step"
        shown += f"; {unseen})" if unseen and compared in PEAKS_WITH_UNSEEN_COPY else ")"
    elif steady in PEAKS_WITH_UNSEEN_COPY and unseen:
        shown += f" ({unseen})"
    noisy = ""
    if spread is not None:
        kind, margin = config.baseline_margins.get(metric, ("relative", config.baseline_margin))
        gated = max(base * margin if kind == "relative" else margin, NOISE_FLOOR[compared])
        if spread > gated:
            # Gated by its spread alone (4 spreads): wide enough not to flap on this noise, and a regression many
            # spreads large still fails. Skipping it instead let a 40x regression pass on a noisy baseline.
            noisy = (f"; noisy: spread {format_metric(compared, spread)} across the baseline's workers, above the "
                     f"{format_metric(compared, gated)} margin")  # fmt: skip
    allowed, how = allowed_value(config, metric, base, spread, compared)
    threshold = f"<= {format_metric(compared, allowed)} ({how}{noisy})"
    if now <= allowed:
        return RuleResult(name, threshold, shown, PASS, "", baseline_path)
    over = f"+{format_metric(compared, now - base)}"
    if spread:
        over += f", {(now - base) / spread:.0f} spreads above the baseline"
    what = metric if compared == metric else f"{metric} ({compared}, one-time steps apart)"
    message = (f"{what} regressed: {format_metric(compared, now)} against {format_metric(compared, base)} in "
               f"{baseline_path} ({over}; {how} allowed); rule: {BASELINE_RULE}")  # fmt: skip
    if compared == metric and spread is None:  # an older baseline: the message it always had
        message = f"{metric} regressed: {format_metric(metric, now)} against {format_metric(metric, base)} in " \
                  f"{baseline_path} ({how} allowed)"  # fmt: skip
    return RuleResult(name, threshold, shown, FAIL, message, baseline_path, explanation(report, compared))


def baseline_rules(config: CheckConfig, metrics: dict[str, float | None], baseline: Report,
                   baseline_path: str, report: Report | None = None) -> list[RuleResult]:  # fmt: skip
    """One rule per metric: fail when the run is worse than the baseline by more than the margin (BASELINE_RULE)."""
    base_metrics = report_metrics(baseline)
    base_spreads = report_spreads(baseline)
    if report is not None and not has_steady_total(baseline):
        # a baseline from before the steady total was taken sum by sum: the run is read the way the baseline was
        metrics = {**metrics, "total_pss_steady": legacy_total_steady(report)}
    # A copy no reading showed (a collection before a worker's first reading) is in that run's peaks: the baseline's
    # at batch 202 read 14 MiB steady against 48 MiB for a run whose copy came before its first reading, the same
    # loader. It is taken to be the largest step either run read, and taken out; where neither read one, both
    # sides' peaks are compared with their steps in.
    unseen = (unseen_copy(report) if report is not None else "") or unseen_copy(baseline)
    if unseen:
        copy = copy_estimate(baseline, *([report] if report is not None else []))
        if copy is None:
            base_metrics = {**base_metrics, **dict.fromkeys(PEAKS_WITH_UNSEEN_COPY)}
            unseen = f"steps in: {unseen}"
        else:
            base_metrics = without_unseen_copies(baseline, base_metrics, copy)
            if report is not None:
                metrics = without_unseen_copies(report, metrics, copy)
            unseen += f", its copy taken as the largest step read ({format_bytes(copy)})"
    return [
        _baseline_row(
            config,
            metric,
            metrics,
            base_metrics,
            base_spreads,
            baseline_path,
            report if report is not None else baseline,
            unseen,
        )  # fmt: skip
        for metric in BASELINE_METRICS
    ]


def _rule_raised(name: str, exc: Exception) -> RuleResult:
    """A rule that raised is a failed row that says so: a check must not pass on a rule it could not evaluate."""
    message = failure_message(exc, 200)
    return RuleResult(name, "-", "not evaluated", FAIL,
                      f"dlprobe's rule raised {type(exc).__name__}: {message} (at {failure_where(exc)}); "
                      "a bug in dlprobe or a damaged report: report it")  # fmt: skip


def _rows(name: str, make: Callable[[], list[RuleResult]]) -> list[RuleResult]:
    try:
        return make()
    except Exception as exc:  # one rule's bug must not lose the others' verdicts (or end in a traceback)
        return [_rule_raised(name, exc)]


def evaluate(config: CheckConfig, report: Report, stop: Stop | None = None,
             baseline: Report | None = None, baseline_path: str = "") -> list[RuleResult]:  # fmt: skip
    """Every rule of the config, in a fixed order: the script, thresholds, hang, findings, baseline."""
    metrics: dict[str, float | None] = {}
    rows: list[RuleResult] = []
    try:
        metrics = report_metrics(report)
    except Exception as exc:  # no metric read: every rule that needs one says so below
        rows.append(_rule_raised("metrics", exc))
    rows += _rows("script_exit", lambda: [_script_rule(report, stop)])
    for key, (metric, what) in THRESHOLD_RULES.items():
        limit = getattr(config, key)
        if limit is not None:
            rows += _rows(key, lambda key=key, limit=limit, metric=metric, what=what: [  # type: ignore[misc]
                _threshold_rule(key, float(limit), metrics[metric], what, metric, config.sources.get(key, ""),
                                _raw(config, key))])  # fmt: skip
    if config.hang_timeout is not None:
        rows += _rows("hang_timeout", lambda: [_hang_rule(config, metrics, stop)])
    for row in rows:  # a failed limit says what explains it (the baseline's rows say it themselves)
        if row.status == FAIL and row.rule in THRESHOLD_RULES and not row.explanation:
            try:
                row.explanation = explanation(report, THRESHOLD_RULES[row.rule][0])
            except Exception:  # noqa: S110 - the context is a help; the verdict stands without it
                pass
    rows += _rows("fail_on", lambda: _finding_rules(config, report["findings"]))
    if baseline is not None:
        rows += _rows("baseline", lambda: baseline_rules(config, metrics, baseline, baseline_path, report))
    return rows


def failed(rows: list[RuleResult]) -> list[RuleResult]:
    return [r for r in rows if r.status == FAIL]
