"""Runs the user's script unmodified as __main__, with the DataLoader hooks installed first."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from collections.abc import Callable

from dlprobe.in_training import hooks, quiet_signals, script_errors
from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.tracebacks import clean_chain, install_excepthook
from dlprobe.redact import redact_argv
from dlprobe.rundir.schema import EV_START

MODULE_FLAG = "-m"


def main() -> None:
    if len(sys.argv) < 2 or (sys.argv[1] == MODULE_FLAG and len(sys.argv) < 3):
        sys.exit("usage: python -m dlprobe.in_training.bootstrap (SCRIPT | -m MODULE) [ARGS...]")
    module = sys.argv[2] if sys.argv[1] == MODULE_FLAG else None
    script, args = (module, sys.argv[3:]) if module is not None else (sys.argv[1], sys.argv[2:])
    script_errors.recorded_by_bootstrap()
    hooks.install()
    log = get_log()
    if log is not None:
        argv = redact_argv(args)  # credentials on the command line never reach events.jsonl
        log.emit(EV_START, script=script, argv=argv, python=sys.version.split()[0], module=module is not None)
    if module is not None:
        # As `python -m`: the current directory first on the path; runpy sets argv[0] to the module's file.
        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
        run = _module_runner(module)
    else:
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        run = _script_runner(script)
    try:
        run()
    except SystemExit as exc:
        hooks.script_ended(normally=exc.code in (None, 0))
        hooks.flush_all()
        raise
    except BaseException as exc:
        hooks.script_ended(normally=False)
        with quiet_signals.held_back():  # a worker dying meanwhile must not raise from the probe's frames
            hooks.flush_all()
            # The traceback reads as if python ran the script: no bootstrap, runpy, hooks or fetch frames anywhere
            # in the chain. Re-raising (rather than printing and exiting) keeps python's own exit status: 1, or
            # death by SIGINT for a KeyboardInterrupt, and any sys.excepthook the script installed.
            clean_chain(exc)
            script_errors.record(exc)
            install_excepthook()
        raise


def _script_runner(script: str) -> Callable[[], object]:
    return lambda: runpy.run_path(script, run_name="__main__")


def _module_runner(module: str) -> Callable[[], object]:
    """Finds the module first, so a missing one reads as python's own message (exit 1), not as a probe traceback."""
    try:
        spec = importlib.util.find_spec(module)
    except Exception as exc:  # a parent package that fails to import: python -m says the same, then exits 1
        problem = f"{type(exc).__name__}: {exc}"
        sys.exit(f"{sys.executable}: Error while finding module specification for {module!r} ({problem})")
    if spec is None:
        sys.exit(f"{sys.executable}: No module named {module}")
    return lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
