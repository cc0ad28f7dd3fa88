"""The process `dlprobe run` started, probed from its first line by the injected sitecustomize.

The target is started exactly as plain python starts it (`python SCRIPT ARGS`, `python -m MODULE ARGS`): no dlprobe
frame on its stack, `__file__`, `sys.argv` and `sys.path` as python sets them, python's own exit status. What a
wrapper around the script used to do is done here instead: the hooks installed before its first line, the `start`
event, and (through `script_errors.watch_uncaught`, chained to whatever `sys.excepthook` the script sets) the
exception that ends it recorded after the batches before it. For a command (`dlprobe run -- torchrun ...`) the
first Python process is the launcher: its ChildFailedError (torchrun's summary of the failed ranks) is recorded.
"""

from __future__ import annotations

import atexit
import sys
from types import TracebackType
from typing import Any

from dlprobe.in_training import hooks, probe_errors, script_errors, takeover
from dlprobe.in_training.event_log import get_log
from dlprobe.redact import redact_argv, redact_text
from dlprobe.rundir.schema import EV_LAUNCHER_FAILURE, EV_START, LAUNCH_COMMAND, LAUNCH_MODULE, STDERR_KEPT_BYTES

LAUNCHER_ERROR = "ChildFailedError"  # torch.distributed.elastic's; named, not imported: the launcher may not have it


def start(launch: str, name: str) -> None:
    """Called by the injected sitecustomize in the target process, before python runs the script's first line."""
    if launch == LAUNCH_COMMAND:
        _watch_launcher()
        return
    hooks.install()
    # Registered after the hooks' own flush, so it runs before it (atexit runs last-in first-out).
    atexit.register(script_errors.record_unhandled_at_exit, takeover.ended_by_exception)
    log = get_log()
    if log is not None:
        module = launch == LAUNCH_MODULE
        # sys.argv is python's here: [SCRIPT, ARGS...], or ["-m", ARGS...] until runpy names the module's file.
        log.emit(
            EV_START,
            script=name if module else sys.argv[0],
            argv=redact_argv(sys.argv[1:]),  # credentials on the command line never reach events.jsonl
            python=sys.version.split()[0],
            module=module,
        )


def _watch_launcher() -> None:
    """Record torchrun's failure summary from the launcher itself (the exception that ends it), so rank-failed does
    not depend on dlprobe reading the launcher's stderr."""
    inner = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
        if exc_type.__name__ == LAUNCHER_ERROR:
            try:
                log = get_log()
                if log is not None:
                    log.emit(EV_LAUNCHER_FAILURE, summary=redact_text(str(exc)[-STDERR_KEPT_BYTES:]))
            except Exception as probe_exc:
                probe_errors.record("target.launcher", probe_exc, "torchrun's failure summary is not recorded")
                probe_errors.flush()
        return inner(exc_type, exc, tb)

    sys.excepthook = hook
