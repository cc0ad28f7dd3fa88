"""A triage: read the log, check the machine, rank the causes, build the one result every output renders."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any, cast

from dlprobe import __version__
from dlprobe.errors import DlprobeError
from dlprobe.redact import redact_text
from dlprobe.rundir.handle import RunDir
from dlprobe.triage.logscan import LogScan, open_log, scan_stream
from dlprobe.triage.machine import KernelLog, MachineFacts, check_machine, log_time, read_kernel_log
from dlprobe.triage.patterns import BY_ID, FAILURE
from dlprobe.triage.rank import diagnose, reproduce

SCHEMA_VERSION = 1
STDIN = "-"


def read_log(path: str) -> LogScan:
    """Scan the log at `path` (`-` for stdin); a missing, unreadable or non-regular path is a usage error."""
    if path == STDIN:
        stream, compressed = open_log(sys.stdin.buffer)
        scan = scan_stream(stream, "<stdin>")
        scan.compressed = compressed
        return scan
    p = Path(path)
    hint = "pass the file holding the failed run's stderr, e.g. after `python train.py 2> train.log`"
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise DlprobeError(f"log file not found: {path}", hint) from None
    except OSError as exc:
        raise DlprobeError(f"cannot read {path}: {exc.strerror or exc}", hint) from None
    if stat.S_ISDIR(mode):
        inside = RunDir(p).stderr
        dir_hint = f"`dlprobe triage {inside}`" if inside.is_file() else "pass a log file inside it"
        raise DlprobeError(f"{path} is a directory, not a log file", f"{dir_hint}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a device like /dev/zero would never end
        raise DlprobeError(f"{path} is not a regular file", hint) from None
    try:
        with open(p, "rb") as raw:
            stream, compressed = open_log(raw)
            scan = scan_stream(stream, str(p))
    except OSError as exc:
        raise DlprobeError(f"cannot read {path}: {exc.strerror or exc}", hint) from None
    scan.compressed = compressed
    return scan


def _no_failure_reason(scan: LogScan) -> str:
    name = scan.source
    if scan.bytes_read == 0:
        return f"{name} is empty: nothing to triage."
    if scan.binary:
        share = 100 * scan.sample_odd / max(1, scan.sample_bytes)
        return (f"{name} does not look like a training log: {share:.0f}% of its first bytes are not text, and it "
                "holds no DataLoader error message.")  # fmt: skip
    reason = (f"No DataLoader failure found in {name} ({scan.lines:,} lines): none of PyTorch's DataLoader error "
              "messages (worker killed or exited unexpectedly, timed out, `Caught ... in DataLoader worker`, shared "
              "memory, too many open files, ...) is in it.")  # fmt: skip
    last = next((t for t in reversed(scan.tracebacks) if t.exception and not t.original), None)
    if last is not None:
        reason += (f" Its last traceback ends in `{last.exception}: {last.message}` (line {last.end_line}), "
                   "not a DataLoader error.")  # fmt: skip
    return reason + " A run that hung without a DataLoader timeout prints nothing: run it under `dlprobe run` instead."


def triage(path: str, machine_check: bool = True, kernel_log: str | None = None) -> dict[str, Any]:
    """The triage result for one log: recognised messages, machine facts, ranked findings, a reproduce command."""
    scan = read_log(path)
    failure_seen = any(BY_ID[m.id].kind == FAILURE for m in scan.matches)
    # Only look at the machine when the log shows something to explain (dmesg can be slow on big hosts).
    if machine_check and failure_seen:
        machine = check_machine(kernel_log)
    else:  # a kernel log saved on the machine that failed is still worth reading
        kernel = read_kernel_log(kernel_log) if kernel_log and failure_seen else KernelLog(None, "not checked")
        machine = MachineFacts(checked=False, kernel=kernel)
    findings = diagnose(scan, machine, log_time(None if path == STDIN else Path(path)))
    failures = [f for f in findings if f.severity == "error"]
    # the log's lines are quoted in the summary, --json and --html: a credential it printed is not
    return cast(
        dict[str, Any],
        _without_credentials(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": "triage",
                "dlprobe_version": __version__,
                "log": scan.to_dict(),
                "failure_found": bool(failures),
                "no_failure_reason": None if failures else _no_failure_reason(scan),
                "machine": machine.to_dict(),
                "findings": [f.to_dict() for f in findings],
                "reproduce": reproduce(scan, findings) if failures else None,
            }
        ),
    )


def _without_credentials(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: _without_credentials(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_credentials(item) for item in value]
    return value
