"""Findings about the run as a whole: the script failed, or it never made a DataLoader."""

from __future__ import annotations

from dlprobe.analysis.model import Finding, RunData
from dlprobe.analysis.text_cut import first_line


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
                    **{k: error.get(k) for k in ("type", "message", "file", "line")},
                    "raised_at_s": _since_start(run, error.get("t")),
                },
            )
        )
    if (
        not run.loaders and run.meta and run.probe_started and not run.meta.get("attached")
    ):  # a silent probe saw nothing: probe-degraded
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


def _since_start(run: RunData, t: float | None) -> float | None:
    """Seconds into the run: what orders the errors of several ranks, and what a person can read."""
    started = run.meta.get("started_at") if run.meta else None
    return round(float(t) - float(started), 2) if t is not None and started is not None else None
