"""`log-to`: what `dlprobe run --log-to wandb|mlflow` added to the script's own W&B or MLflow logs, or why nothing.

Read from the `log_to` events each training process writes at exit (in_training/sinks.py); a library asked for with
no event is a process that never reached its exit handlers (killed), said as such rather than as "nothing logged"."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.model import Finding, RunData
from dlprobe.rundir.schema import (
    EV_LOG_TO,
    LOG_TO_FAILED,
    LOG_TO_LOGGED,
    LOG_TO_NO_LOGS,
    LOG_TO_NO_NUMBERS,
    LOG_TO_NOT_IMPORTED,
    LOG_TO_PREFIX,
)

LIBRARY_NAMES = {"wandb": "W&B", "mlflow": "MLflow"}
UNREPORTED = "unreported"  # asked for, but no process said what it did


def _why_not(sink: str, state: str, calls: int) -> str:
    library = LIBRARY_NAMES.get(sink, sink)
    return {
        LOG_TO_NOT_IMPORTED: f"the script never imported {sink}",
        LOG_TO_NO_LOGS: f"the script imported {sink} but logged nothing through it"
        + (" (no wandb.log/run.log: no active run)" if sink == "wandb" else " (no log_metric/log_metrics call)"),
        LOG_TO_NO_NUMBERS: f"all {calls} of its {library} logs came before dlprobe's first numbers (the first second)",
        LOG_TO_FAILED: f"adding the numbers failed at each of its {calls} {library} logs (see probe-degraded)",
        UNREPORTED: "the training process never reached its exit handlers (killed?), so it could not say",
    }.get(state, state)


def _sink_rows(run: RunData) -> list[dict[str, Any]]:
    asked = [str(name) for name in run.meta.get("log_to") or []] if run.meta else []
    rows = [
        {key: ev.get(key) for key in ("sink", "state", "calls", "logged", "keys", "target", "failures")}
        for ev in run.events
        if ev.get("ev") == EV_LOG_TO
    ]
    seen = {row["sink"] for row in rows}
    rows += [
        {"sink": name, "state": UNREPORTED, "calls": 0, "logged": 0, "keys": 0, "target": None, "failures": 0}
        for name in asked
        if name not in seen
    ]
    return rows


def find_log_to(run: RunData) -> list[Finding]:
    rows = _sink_rows(run)
    if not rows:
        return []
    said: list[str] = []
    for row in rows:
        sink, state = str(row["sink"]), str(row["state"])
        library = LIBRARY_NAMES.get(sink, sink)
        calls, logged = int(row["calls"] or 0), int(row["logged"] or 0)
        if state == LOG_TO_LOGGED:
            where = f" (run {row['target']})" if row.get("target") else ""
            failed = f", {row['failures']} failed" if row.get("failures") else ""
            said.append(f"{library}: {row['keys']} {LOG_TO_PREFIX} keys on {logged} of the script's {calls} logs"
                        f"{where}{failed}")  # fmt: skip
        else:
            said.append(f"{library}: nothing, {_why_not(sink, state, calls)}")
    any_logged = any(row["state"] == LOG_TO_LOGGED for row in rows)
    return [
        Finding(
            code="log-to",
            severity="info",
            title="dlprobe's numbers in the script's own logs: " + "; ".join(said),
            detail="With --log-to, each of the script's own log calls carries dlprobe's latest per-worker numbers "
            f"(USS, PSS by kind, descriptors, batches and data wait per loader, /dev/shm) under {LOG_TO_PREFIX}, at "
            "the script's step and cadence; its own keys and steps are as it logged them. W&B: in the same "
            "wandb.log row; MLflow: one log_metrics on the same run, step and timestamp, once per step.",
            fix="none: chart the dlprobe/ keys beside the loss in W&B or MLflow (docs/fleet.md)"
            if any_logged
            else "Log through the library in the script itself (wandb.init then wandb.log; mlflow.start_run then "
            "mlflow.log_metric), or leave --log-to out.",
            evidence={"sinks": rows},
        )
    ]
