"""`python -m dlprobe run ...` with a time stamp at each phase boundary, written as JSON lines to $DLPROBE_TIMELINE.

Used by benchmarks/wall_timeline.py. dlprobe itself is not changed: the functions that bound each phase are wrapped
as their modules are imported (an import hook, so nothing is imported earlier than `dlprobe run` imports it).
Usage: DLPROBE_TIMELINE=FILE python benchmarks/_timeline_run.py run --quiet --out DIR script.py ARGS
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# (phase, wall clock, this process's CPU seconds so far): the CPU column is steadier than wall time on a busy
# machine. The first stamp is taken before dlprobe is imported.
_STAMPS: list[tuple[str, float, float]] = [("dlprobe start", time.time(), time.process_time())]


def stamp(name: str) -> None:
    _STAMPS.append((name, time.time(), time.process_time()))


def _wrap(module: ModuleType, qualname: str, label: str, before: bool = False) -> None:
    """Stamp `label` when the function returns (and `label` + " start" when it is called, with `before`)."""
    owner: Any = module
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    original = getattr(owner, name, None)
    if original is None:  # another version of dlprobe (--baseline) without this function: that phase goes unmarked
        return

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before:
            stamp(label + " start")
        try:
            return original(*args, **kwargs)
        finally:
            stamp(label)

    setattr(owner, name, wrapper)


def _patch_run_watch(module: ModuleType) -> None:
    original = module._exit_waiter

    def exit_waiter(child: Any) -> Callable[[float], bool]:
        wait = original(child)

        def noticing(timeout: float) -> bool:
            called = (time.time(), time.process_time())
            done = wait(timeout)
            if done:
                # When the last wait began: an exit before it was noticed late, after the tick in between.
                _STAMPS.append(("last exit wait began", *called))
                stamp("supervisor noticed the exit")
                _BEFORE_EXIT.update(sys.modules)
            return bool(done)

        return noticing

    module._exit_waiter = exit_waiter
    # The report's modules, imported while the target starts: the supervisor's CPU after this is its sampling.
    _wrap(module, "_preload", "report's modules preloaded")
    _wrap(module, "_sample_until_exit", "workers gone, sampler closed")
    _wrap(module, "LiveView.close", "output pumps joined", before=True)
    _wrap(module, "watch", "result.json written")


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "dlprobe.supervisor.run_target": lambda m: _wrap(m, "_start", "target started"),
    "dlprobe.supervisor.run_watch": _patch_run_watch,
    "dlprobe.supervisor.stack_recorder": lambda m: [
        _wrap(m, "StackRecorder.stop", "py-spy stopped", before=True),
        _wrap(m, "StackRecorder._next_burst", "py-spy burst started"),
    ],
    "dlprobe.supervisor.hang.guard": lambda m: _wrap(m, "RunGuard.finish", "hang guard finished", before=True),
    "dlprobe.commands.outputs": lambda m: [
        _wrap(m, "report_for", "analysis (report_for)"),
        _wrap(m, "_write_report", "report.json written"),
        _wrap(m, "run_html_problem", "report.html written"),
        _wrap(m, "trace_problem", "trace.json written"),
        _wrap(m, "speedscope_problem", "speedscope written"),
        _wrap(m, "_print_summary", "summary printed"),
        _wrap(m, "write_outputs", "outputs done"),
    ],
    "dlprobe.render.plot": lambda m: _wrap(m, "plot_in_background", "plot process started"),
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self.inner = inner
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, patch)
                return spec
        return None


# The modules imported before the target's exit was noticed: any other one was imported on the report's way.
_BEFORE_EXIT: set[str] = set()


def _write() -> None:
    stamp("dlprobe atexit")
    late = sorted(set(sys.modules) - _BEFORE_EXIT) if _BEFORE_EXIT else []
    with open(os.environ["DLPROBE_TIMELINE"], "w") as f:
        f.write(json.dumps({"late_imports": late}) + "\n")
        for name, t, cpu in _STAMPS:
            f.write(json.dumps({"phase": name, "t": t, "cpu": cpu}) + "\n")


def main() -> None:
    sys.meta_path.insert(0, _Finder())
    atexit.register(_write)
    from dlprobe.cli import main as cli_main

    sys.argv = ["dlprobe", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
