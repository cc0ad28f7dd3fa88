"""Probe DataLoaders inside the current process (notebooks, test suites): same run directory, same report."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from dlprobe import __version__, atomic
from dlprobe.errors import DlprobeError
from dlprobe.in_training import event_log
from dlprobe.rundir.files import JsonlTail, write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import RUN_SCHEMA_VERSION, Meta, Result
from dlprobe.supervisor.own_checks import WAIT_S as CHECKS_WAIT_S
from dlprobe.supervisor.sampler import TICK_S, Sampler

if TYPE_CHECKING:
    from dlprobe.analysis.report.schema import Report


class LimitExceeded(AssertionError):
    """A probed loader broke a limit; the message lists each failing rule."""


class Watch:
    """`with dlprobe.watch() as w:` probes every DataLoader iterated in the block; afterwards `w.report` holds
    the same report as `dlprobe run` writes, and `w.check(max_worker_uss_growth="100 MB")` gates it.

    Memory is sampled by a thread of this process (reading /proc/PID/smaps_rollup of this process and of every
    child, i.e. the loader's workers), so it shares the GIL with the loop; use `dlprobe run` for exact timings.
    """

    def __init__(self, out: str | os.PathLike[str] | None = None, name: str = "watch") -> None:
        self.out = Path(out) if out is not None else None
        self.name = name
        self.run_dir: Path | None = None
        self.report: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_log: event_log.EventLog | None = None
        self._samples: Any = None

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.report.get("findings", []))

    def __enter__(self) -> Watch:
        import torch.utils.data.dataloader as dataloader_module

        from dlprobe.in_training import hooks
        from dlprobe.supervisor.run_options import machine_facts
        from dlprobe.supervisor.run_watch import Progress

        run_dir = self.out or Path(tempfile.mkdtemp(prefix=f"dlprobe-{self.name}-"))
        files = RunDir(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            if files.meta.exists():
                raise DlprobeError(f"{run_dir} already holds a dlprobe run", hint="pass a new out= directory")
            files.events.touch()
            self._samples = atomic.create_file(files.samples)  # never through a link left there
        except OSError as exc:
            raise DlprobeError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}",
                               hint="pass out= with a directory you can write to") from None  # fmt: skip
        self.run_dir = run_dir
        hooks.patch_dataloader(dataloader_module)
        hooks.reset()
        self._previous_log = event_log._log
        event_log._log = event_log.EventLog(str(run_dir))
        meta: Meta = {
            "schema_version": RUN_SCHEMA_VERSION,
            "dlprobe_version": __version__,
            "script": f"<in-process {self.name}>",
            "argv": [],
            "cwd": os.getcwd(),
            "started_at": time.time(),
            "machine": machine_facts(),
            "target_pid": os.getpid(),
            "in_process": True,
        }
        write_json(files.meta, meta)
        sampler = Sampler(os.getpid(), self._samples, None, keep_open=False)  # the user's own process
        progress, tail = Progress(), JsonlTail(files.events)

        def sample() -> None:
            while True:
                progress.feed(tail.read_new(), sampler)  # hear of new workers at once, not on the next discovery
                sampler.tick(time.time())
                if self._stop.wait(TICK_S):
                    break
            sampler.close()  # the readings held for downsampling are written before the file closes

        self._thread = threading.Thread(target=sample, name="dlprobe-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        from dlprobe.analysis.report.build import report_for
        from dlprobe.in_training import detached, hooks, loader_registry, probe_errors

        assert self.run_dir is not None and self._thread is not None
        loader_registry.flush_all()
        # dlprobe's own checks (the readiness copy, the sample check) run detached: their events go in this report
        late = detached.wait(CHECKS_WAIT_S)
        if late:
            probe_errors.record("watch.own_checks", TimeoutError(f"still running after {CHECKS_WAIT_S:g} s"),
                                f"dlprobe's own checks {late} were stopped: their outcome is missing")  # fmt: skip
        self._stop.set()
        self._thread.join()
        self._samples.close()
        current, event_log._log = event_log._log, self._previous_log
        if current is not None:
            current.close()
        hooks.reset()
        failed = exc_type is not None
        result: Result = {"returncode": int(failed), "exit_code": int(failed), "signal": None, "ended_at": time.time()}
        write_json(RunDir(self.run_dir).result, result)
        _, report = report_for(self.run_dir)
        self.report = cast(dict[str, Any], report)  # the API hands users a plain dict (its shape: report.schema.json)
        write_json(RunDir(self.run_dir).report, self.report)

    def check(self, **limits: Any) -> list[Any]:
        """Evaluate limits (keys as in `dlprobe check`'s config) on the report; returns the rule results."""
        from dlprobe.check.config import config_from_mapping
        from dlprobe.check.rules import evaluate

        return evaluate(
            config_from_mapping(limits, "watch.check()"), cast("Report", self.report)
        )  # built by report_for

    def assert_ok(self, **limits: Any) -> None:
        """Raise LimitExceeded (an AssertionError) naming every rule the probed loaders broke."""
        from dlprobe.check.rules import failed

        bad = failed(self.check(**limits))
        if bad:
            lines = [f"{r.rule}: {r.message}" for r in bad]
            raise LimitExceeded("DataLoader broke dlprobe limits:\n  " + "\n  ".join(lines) + f"\nrun: {self.run_dir}")


def watch(out: str | os.PathLike[str] | None = None) -> Watch:
    """Probe every DataLoader iterated inside the `with` block; see Watch."""
    return Watch(out)


def probe_loader(loader: Iterable[Any], max_batches: int | None = None,
                 out: str | os.PathLike[str] | None = None) -> Watch:  # fmt: skip
    """Iterate a DataLoader (one epoch, or max_batches) under the probe and return the finished Watch."""
    with Watch(out, name="probe_loader") as w:
        for n, _ in enumerate(loader, start=1):
            if max_batches is not None and n >= max_batches:
                break
    return w
