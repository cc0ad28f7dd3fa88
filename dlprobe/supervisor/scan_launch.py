"""Outside the target: runs the script up to its DataLoader with the scan takeover, shows progress, folds events.

Never imports torch. The scan's events land in a throw-away run directory; whatever arrived before the target
ended (Ctrl-C, a crash of the scan process itself) is still folded into the result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from typing import IO, Any

from dlprobe.errors import DlprobeError
from dlprobe.redact import redact_argv
from dlprobe.rundir.files import JsonlTail
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    LAUNCH_SCRIPT,
    RUN_DIR_ENV,
    SCAN_OPTIONS_ENV,
    TAKEOVER_ENV,
    TAKEOVER_LOADER_ENV,
)
from dlprobe.scan.options import ScanOptions
from dlprobe.scan.progress import ScanProgress
from dlprobe.scan.result import ScanResult
from dlprobe.supervisor.launch import inject, target_command
from dlprobe.supervisor.run_target import check_target

TAKEOVER_FUNCTION = "dlprobe.in_training.scan.engine:take_over"  # named here as text: this side never imports torch
POLL_S = 0.1


def _pump(source: IO[bytes], sink: Callable[[bytes], None]) -> threading.Thread:
    def run() -> None:
        for line in iter(source.readline, b""):
            sink(line)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_scan(
    script: str,
    args: list[str],
    loader: int | None,
    options: ScanOptions,
    progress: ScanProgress,
    launch: str = LAUNCH_SCRIPT,
) -> ScanResult:
    """Scan the dataset of the script's (or module's) DataLoader number `loader` (None: every one before training)."""
    check_target(script, launch, args)
    # what scan.json, its page and the 'next loader' line show: credentials redacted (the command runs with args)
    result = ScanResult(script, redact_argv(args), loader, options.selection_text())
    interrupts = 0
    with tempfile.TemporaryDirectory(prefix="dlprobe-scan-") as run_dir:
        events = RunDir(run_dir).events
        events.touch()
        env = {
            **os.environ,
            RUN_DIR_ENV: run_dir,
            TAKEOVER_ENV: TAKEOVER_FUNCTION,
            TAKEOVER_LOADER_ENV: str(loader or 0),
            SCAN_OPTIONS_ENV: options.to_env(),
            "PYTHONUNBUFFERED": "1",
        }
        command = target_command(launch, script, args)
        inject(env, launch, script)  # the script is started as python starts it; the hooks come in through this
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout is not None and child.stderr is not None
        # The script's own output goes to stderr, above the bar: stdout is kept for the summary.
        pumps = [_pump(child.stdout, progress.output), _pump(child.stderr, progress.output)]

        def on_interrupt(_signum: int, _frame: Any) -> None:
            nonlocal interrupts
            interrupts += 1
            # The first Ctrl-C asks the scan to stop and report; a second one ends it at once.
            if interrupts == 1:
                child.send_signal(signal.SIGINT)
            else:
                child.kill()

        previous = signal.signal(signal.SIGINT, on_interrupt)
        tail = JsonlTail(events)
        try:
            while True:
                result.feed(tail.read_new())
                progress.update(result)
                try:
                    child.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:  # noqa: S112 - still running: poll again
                    continue
            for pump in pumps:
                pump.join(timeout=5)
            result.feed(tail.read_new())
        finally:
            signal.signal(signal.SIGINT, previous)
            progress.close()
    result.returncode = child.returncode
    result.interrupted = result.interrupted or (interrupts > 0 and not result.complete)
    _check_reached_scan(result, script, loader or 0, interrupts)
    return result


def _check_reached_scan(result: ScanResult, script: str, loader: int, interrupts: int) -> None:
    """Turn every way of not getting to (or through) the scan's start into one clear error."""
    if result.error is not None:
        raise DlprobeError(*result.error)
    if result.started:
        return
    if interrupts:
        raise DlprobeError("interrupted before the scan started", exit_code=130)
    code = result.returncode
    ended = f"exit code {code}" if code is None or code >= 0 else f"signal {signal.Signals(-code).name}"
    if result.script_error is not None:
        raise DlprobeError(
            f"{script} failed before reaching its DataLoader: {result.script_error.get('type')}: "
            f"{result.script_error.get('message')}",
            hint="its traceback is above; the scan starts when the script first iterates the DataLoader",
        )
    if not result.loaders_seen:
        raise DlprobeError(
            f"{script} ended ({ended}) without iterating a torch DataLoader",
            hint="scan takes the dataset from the DataLoader the script iterates; pass the script that trains, "
            "with the arguments it needs to get to its training loop",
        )
    if not result.taken_over:
        count = len(result.loaders_seen)
        raise DlprobeError(
            f"--loader {loader}: the script iterated only {count} DataLoader{'s' if count != 1 else ''} "
            f"(loader {'0' if count == 1 else f'0 to {count - 1}'}) before it ended ({ended})",
            hint="loaders are numbered from 0 in the order the script first iterates them",
        )
    raise DlprobeError(
        f"the scan ended ({ended}) before it could start",
        hint="the messages above say why; run the script on its own to check that it reaches its DataLoader",
    )
