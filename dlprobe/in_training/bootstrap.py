"""Runs the user's script unmodified as __main__, with the DataLoader hooks installed first."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from types import TracebackType

from dlprobe.frames import is_probe_file
from dlprobe.in_training import hooks
from dlprobe.in_training.event_log import get_log


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop the probe's and runpy's frames so the traceback reads as if python ran the script."""
    while tb is not None and is_probe_file(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m dlprobe.in_training.bootstrap SCRIPT [ARGS...]")
    script, args = sys.argv[1], sys.argv[2:]
    hooks.install()
    log = get_log()
    if log is not None:
        log.emit("start", script=script, argv=args, python=sys.version.split()[0])
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        hooks.flush_all()
        raise
    except BaseException as exc:
        hooks.flush_all()
        tb = _user_frames(exc.__traceback__)
        where = traceback.extract_tb(tb)[-1] if tb is not None else None
        if log is not None:
            log.emit(
                "script_error",
                type=type(exc).__name__,
                message=str(exc)[:4000],
                file=where.filename if where else getattr(exc, "filename", None),
                line=where.lineno if where else getattr(exc, "lineno", None),
            )
        traceback.print_exception(type(exc), exc, tb)
        sys.stderr.flush()
        sys.exit(1)


if __name__ == "__main__":
    main()
