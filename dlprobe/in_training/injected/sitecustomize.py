"""Injected by `dlprobe run` on the command's PYTHONPATH: probes every Python process that imports torch's DataLoader.

Python imports `sitecustomize` in every process it starts (launchers, ranks, re-executed scripts, spawn-started
workers), so this is how a job started by torchrun, `python -m`, a shell script or Lightning's DDP gets probed without
a line changed. It does nothing unless $DLPROBE_RUN_DIR is set, imports nothing of dlprobe (and so costs a process
that never touches torch only this file) until torch's dataloader module is imported, never raises for the probe's
own failures, and then runs the user's own sitecustomize, if one is further on the path, as Python would have.
"""

import os
import sys
from types import ModuleType

# Spelled here rather than imported from dlprobe.rundir.schema (RUN_DIR_ENV, PACKAGE_PATH_ENV, EV_PROBE_ERROR,
# EVENTS_FILE): importing dlprobe in every process would cost the ones that never touch torch. A unit test keeps
# them equal.
RUN_DIR_ENV = "DLPROBE_RUN_DIR"
PACKAGE_PATH_ENV = "DLPROBE_PACKAGE_PATH"
TARGET_ENV = "DLPROBE_TARGET"
EVENTS_FILE = "events.jsonl"
EV_PROBE_ERROR = "probe_error"
DATALOADER_MODULE = "torch.utils.data.dataloader"
HERE = os.path.dirname(os.path.abspath(__file__))


def _record_failure(where: str, exc: BaseException, consequence: str) -> None:
    """A probe failure goes to the run's event log, never into the user's output."""
    try:
        import json
        import time

        line = {
            "ev": EV_PROBE_ERROR,
            "t": time.time(),
            "pid": os.getpid(),
            "where": where,
            "type": type(exc).__name__,
            "message": str(exc)[:500],
            "consequence": consequence,
            "count": 1,
        }
        fd = os.open(
            os.path.join(os.environ[RUN_DIR_ENV], EVENTS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        )
        try:
            os.write(fd, (json.dumps(line, default=str) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:  # noqa: S110 - nowhere left to report to: the run directory itself is unwritable
        pass


def _import_probe(name: str) -> ModuleType:
    """dlprobe.in_training.<name>. In the target process this runs before python puts the script's directory (or,
    for -m, the current one) on sys.path: a `dlprobe` folder there is never what is imported."""
    import importlib

    try:
        return importlib.import_module("dlprobe.in_training." + name)
    except ImportError:
        # This python has dlprobe on no path of its own (another environment): use the supervisor's copy.
        package_path = os.environ.get(PACKAGE_PATH_ENV)
        if not package_path:
            raise
        sys.path.append(package_path)
        return importlib.import_module("dlprobe.in_training." + name)


class DataLoaderFinder:
    """A meta-path finder that wakes only for torch's dataloader module and hands it to dlprobe's hooks."""

    _dlprobe_finder = True  # hooks.install() (in the target) then adds no second finder

    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        if fullname != DATALOADER_MODULE:
            return None
        try:
            hooks = _import_probe("hooks")
            return hooks.patched_spec(fullname, path, target, self)
        except Exception as exc:
            # the program only: its arguments may hold a credential, and dlprobe's redaction cannot be imported here
            program = sys.argv[0] if sys.argv else "?"
            _record_failure(
                "sitecustomize.hooks", exc, f"process {os.getpid()} ({program}) is not probed: no DataLoader events"
            )
            return None


def _install() -> None:
    if not os.environ.get(RUN_DIR_ENV):
        return
    try:
        if not any(getattr(finder, "_dlprobe_finder", False) for finder in sys.meta_path):
            sys.meta_path.insert(0, DataLoaderFinder())  # type: ignore[arg-type]  # typing is not imported here
    except Exception as exc:
        _record_failure("sitecustomize.install", exc, f"process {os.getpid()} is not probed")


def _start_target() -> None:
    """The process `dlprobe run` started itself (its parent is the supervisor named in $DLPROBE_TARGET) is probed
    from its first line, as plain python starts it: no wrapper of dlprobe's runs the script."""
    supervisor, _, rest = os.environ.get(TARGET_ENV, "").partition(":")
    if not supervisor.isdigit() or int(supervisor) != os.getppid():
        return
    launch, _, name = rest.partition(":")
    try:
        _import_probe("target").start(launch, name)
    except Exception as exc:
        _record_failure(
            "sitecustomize.target", exc, f"process {os.getpid()} {sys.argv[:3]} is not probed from its start"
        )


def _chain() -> None:
    """Run the user's own sitecustomize (the next one on the path), exactly once, as Python would have."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != HERE]
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    import importlib.util

    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    # The user's errors propagate: site.py prints its usual "Error in sitecustomize" line, as without dlprobe.
    spec.loader.exec_module(module)


_install()
if os.environ.get(RUN_DIR_ENV):
    _start_target()
_chain()
