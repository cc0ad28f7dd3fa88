"""Runs the user's script unmodified as __main__, with the DataLoader hooks installed first."""

from __future__ import annotations

import os
import runpy
import sys
import traceback

from dlprobe.in_training import hooks
from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.tracebacks import clean_chain, install_excepthook
from dlprobe.rundir.schema import EV_SCRIPT_ERROR, EV_START


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m dlprobe.in_training.bootstrap SCRIPT [ARGS...]")
    script, args = sys.argv[1], sys.argv[2:]
    hooks.install()
    log = get_log()
    if log is not None:
        log.emit(EV_START, script=script, argv=args, python=sys.version.split()[0])
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        hooks.flush_all()
        raise
    except BaseException as exc:
        hooks.flush_all()
        # The traceback reads as if python ran the script: no bootstrap, runpy, hooks or fetch frames anywhere
        # in the chain. Re-raising (rather than printing and exiting) keeps python's own exit status: 1, or
        # death by SIGINT for a KeyboardInterrupt, and any sys.excepthook the script installed.
        clean_chain(exc)
        if log is not None and not isinstance(exc, KeyboardInterrupt):
            tb = exc.__traceback__
            where = traceback.extract_tb(tb)[-1] if tb is not None else None
            log.emit(
                EV_SCRIPT_ERROR,
                type=type(exc).__name__,
                message=str(exc)[:4000],
                file=where.filename if where else getattr(exc, "filename", None),
                line=where.lineno if where else getattr(exc, "lineno", None),
            )
        install_excepthook()
        raise


if __name__ == "__main__":
    main()
