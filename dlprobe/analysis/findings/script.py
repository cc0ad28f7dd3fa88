"""Findings about the run as a whole: the script failed, or it never made a DataLoader."""

from __future__ import annotations

import re
from typing import Any, cast

from dlprobe.analysis.evidence.failures import GrewMost
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import as_evidence
from dlprobe.analysis.measures.stats import growth, metric_summary
from dlprobe.analysis.run.model import RunData
from dlprobe.analysis.run.teardown import teardown_evidence, teardown_note
from dlprobe.analysis.run.text_cut import first_line
from dlprobe.units import format_bytes


def find_run_problems(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    error = run.script_error
    exit_code = run.result.get("exit_code")
    if error is not None:
        where = f" ({error.get('file')}:{error.get('line')})" if error.get("line") else ""
        findings.append(
            Finding(
                code="script-error",
                severity="error",
                title=f"The script raised {error['type']}: {first_line(error.get('message') or '', 150)}",
                detail=f"The training script stopped with an uncaught {error['type']}{where}; its traceback is in "
                + (
                    "the script's stderr and in stderr.log of the run directory."
                    if run.stderr_tail
                    else "the script's stderr, where it was printed."
                ),
                fix="Fix the error in the script (run it with plain `python` to compare), then probe it again.",
                evidence={
                    **as_evidence({k: error.get(k) for k in ("type", "message", "file", "line")}),
                    "raised_at_s": _since_start(run, error.get("t")),
                },
            )
        )
    killed = _script_oom_killed(run)
    if killed is not None and error is None:
        findings.append(killed)
    if (
        not run.loaders and run.meta and run.probe_started and not run.meta.get("attached")
    ):  # a silent probe saw nothing: probe-degraded
        own = [str(o) for o in run.meta.get("own_options_after_script") or []]
        if exit_code == 2 and own:  # 2: a usage error (argparse, click): the script refused what it was given
            findings.append(_own_options_to_script(run, own))
            return findings
        findings.append(
            Finding(
                code="no-loader",
                severity="info",
                title="The script created no torch DataLoader, so there was nothing to probe",
                detail="dlprobe watches torch.utils.data.DataLoader objects (and subclasses) that the script "
                "iterates over. The script ended"
                + (f" with exit code {exit_code}" if exit_code is not None else "")
                + " before iterating any.",
                fix="Point dlprobe at the script that builds and iterates the DataLoader, with the same arguments "
                "you train with.",
                evidence={"exit_code": exit_code},
            )
        )
    return findings


def _own_options_to_script(run: RunData, own: list[str]) -> Finding:
    """no-loader, where the script refused dlprobe's own options written after it (they are the script's there)."""
    shown = " ".join(own)
    script = str(run.meta.get("script") or "SCRIPT")
    return Finding(
        code="no-loader",
        severity="warning",
        title=f"The script exited 2 (a usage error) before any DataLoader: {shown} went to {script}, not to dlprobe",
        detail=f"Everything after the script on dlprobe's command line is the script's own: {script} got {shown}, "
        "which are dlprobe run's options, and stopped with exit code 2, the code of a usage error, before it "
        "iterated any DataLoader.",
        fix=f"Put dlprobe's options before the script: `dlprobe run {shown} {script} ...`.",
        evidence={"exit_code": 2, "own_options": own},
    )


def _since_start(run: RunData, t: float | None) -> float | None:
    """Seconds into the run: what orders the errors of several ranks, and what a person can read."""
    started = run.meta.get("started_at") if run.meta else None
    return round(float(t) - float(started), 2) if t is not None and started is not None else None


GREW_MIN = 32 * 1024 * 1024  # a process's private memory rising this much while it lived is what filled the limit


def _what_grew(run: RunData) -> tuple[str, dict[str, Any] | None]:
    """Which of the job's processes grew its private memory (USS, first reading to peak, teardown readings cut) the
    most, in words for the killed training process's finding, and as evidence; ("", None) where none rose GREW_MIN."""
    grown = [(growth(p.series, "uss"), p) for p in run.processes if p.role in ("main", "worker")]
    grown = [(g, p) for g, p in grown if g >= GREW_MIN]
    if not grown:
        return "", None
    most, proc = max(grown, key=lambda gp: gp[0])
    uss = metric_summary(proc.series, "uss")
    who = "the training process" if proc.role == "main" else f"worker {proc.worker_id} of loader {proc.loader_id}"
    workers = [metric_summary(p.series, "uss")["peak"] for p in run.processes if p.role == "worker"]
    known = [w for w in workers if w is not None]
    beside = (f"; its {len(known)} worker(s) held at most {format_bytes(max(known))} each"
              if proc.role == "main" and known else "")  # fmt: skip
    words = (f" Of the job's processes, {who} (pid {proc.pid}) grew the most: its private memory (USS) rose from "
             f"{format_bytes(uss['start'] or 0)} to {format_bytes(uss['peak'] or 0)}{beside}.")  # fmt: skip
    return words, {"pid": proc.pid, "role": proc.role, "worker_id": proc.worker_id, "uss_growth_bytes": most,
                   "uss_peak_bytes": uss["peak"]}  # fmt: skip


def _script_oom_killed(run: RunData) -> Finding | None:
    """The training process itself killed by the kernel's OOM killer: its exit was a signal and the kernel log names
    its pid. Only what the kernel says: another SIGKILL (a user, a scheduler, dlprobe stopping a hang) is not this."""
    signal = run.result.get("signal")
    if signal is None:
        return None
    mains = {p.pid for p in run.processes if p.role == "main"}
    kills = [k for k in (run.kernel or {}).get("kills") or [] if isinstance(k, dict) and k.get("pid") in mains]
    if not kills:
        return None
    kill = kills[0]
    limit = run.system.cgroup_limit
    where = (
        f"its memory cgroup's limit ({format_bytes(limit)})" if kill.get("cgroup") and limit else "the machine's memory"
    )
    grew, grown = _what_grew(run)
    fix = "Make the job use less memory (the memory findings name what grew), or give it more (a higher limit)."
    if grown is not None and grown["role"] == "main":
        fix = ("Make the training process hold less: its own memory grew, not the workers' (look for what it keeps "
               "from step to step: a list of batches, outputs or losses kept as tensors, arrays appended per step; "
               "`tracemalloc` or memray on the script names the line), or give the job more memory (a higher "
               "limit).")  # fmt: skip
    return Finding(
        code="script-killed",
        severity="error",
        title=f"The kernel's OOM killer killed the training process (pid {kill['pid']}, {signal}): the job reached "
        + where,
        detail="The kernel chose the training process, not a worker, when the job ran out of memory: the script ended "
        "without an exception or a traceback."
        + (grew or " The memory findings say what grew.")
        + teardown_note(run, run.workers()),
        fix=fix,
        evidence={
            **({"grew_most": cast("GrewMost", grown)} if grown is not None else {}),
            "pid": kill["pid"],
            "cause": "oom",
            "signal": signal,
            "exit_code": run.result.get("exit_code"),
            "kernel_log": kill.get("line"),
            "cgroup_limit_bytes": limit,
            **as_evidence(teardown_evidence(run, run.workers())),
        },
    )


# What the script's own uncaught exception can restate: a worker's death or a hang torch turned into an error.
_RESTATED_BY_SCRIPT_ERROR = ("worker-killed", "shm-exhausted", "bad-sample", "too-few-shards", "worker-hang")


def restates(cause: Finding, symptom: Finding) -> str | None:
    """The script's exception is torch re-raising what the cause already says (the worker's death, its exception)."""
    if symptom.code != "script-error" or cause.code not in _RESTATED_BY_SCRIPT_ERROR:
        return None
    message = str(symptom.evidence.get("message") or "")
    pid = cause.evidence.get("pid")
    pids = [str(p) for p in cause.evidence.get("pids") or ([pid] if pid is not None else [])]
    restated = (
        # torch's "DataLoader worker (pid 8913) is killed by signal" or "DataLoader worker (pid(s) 8913) exited
        # unexpectedly": the same worker
        ("DataLoader worker" in message and any(re.search(rf"\b{pid}\b", message) for pid in pids))
        or (cause.code == "bad-sample" and cause.evidence.get("exception") == symptom.evidence.get("type"))
        or (cause.code == "worker-hang" and "timed out" in message)
        or (cause.code in ("too-few-shards", "shm-exhausted") and "DataLoader worker" in message)
    )
    return f"the script's {symptom.evidence.get('type') or 'exception'} (script-error)" if restated else None
