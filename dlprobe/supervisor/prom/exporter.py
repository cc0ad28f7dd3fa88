"""Renders the live run's exposition at the sampler's cadence and hands it to the transports asked for. Nothing
here may stop the run: every failure is a probe problem (supervisor/problems.py) and the next refresh tries again."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING

from dlprobe.rundir.schema import PromMeta
from dlprobe.supervisor.problems import Problems
from dlprobe.supervisor.prom.exposition import render
from dlprobe.supervisor.prom.metrics import JobLabels, LiveState, families
from dlprobe.supervisor.prom.setup import PromSetup
from dlprobe.supervisor.prom.textfile import Textfile
from dlprobe.supervisor.sampler import ROUND_S

if TYPE_CHECKING:
    from dlprobe.supervisor.run_watch import Progress
    from dlprobe.supervisor.sampler import Sampler

# As often as the sampler reads a moving process's smaps_rollup: a refresh in between would repeat the last values.
REFRESH_S = ROUND_S
# The environment variables that name a job for a cluster's scheduler, first found wins; else the run directory's
# name (the script and the start time), which differs per node: set DLPROBE_JOB to one name for every node.
JOB_ENV = ("DLPROBE_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
TEXTFILE_WHERE = "prometheus textfile"
HTTP_WHERE = "prometheus /metrics"
EXPOSITION_WHERE = "prometheus exposition"


def job_name(run_dir: Path) -> str:
    for name in JOB_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return run_dir.name


class Exporter:
    def __init__(self, setup: PromSetup, run_dir: Path, problems: Problems, started_at: float, target_pid: int):
        self.problems = problems
        self.started_at = started_at
        self.target_pid = target_pid
        self.job = JobLabels(job_name(run_dir), platform.node())
        self.textfile = Textfile(setup.textfile_dir, self.job.job, os.getpid()) if setup.textfile_dir else None
        self.server = setup.server
        self.next_refresh = 0.0
        if self.server is not None:
            self.server.start(lambda exc: problems.record(HTTP_WHERE, exc, "a scrape of /metrics failed"))

    def meta(self) -> PromMeta:
        """Where the exposition is, for meta.json (port 0: the port the system chose)."""
        out: PromMeta = {"job": self.job.job}
        if self.textfile is not None:
            out["textfile"] = str(self.textfile.path)
        if self.server is not None:
            out["listen"] = self.server.address
        return out

    def refresh(self, now: float, progress: Progress, sampler: Sampler, hangs: int, force: bool = False) -> None:
        if now < self.next_refresh and not force:
            return
        self.next_refresh = now + REFRESH_S
        try:
            state = LiveState(progress, sampler, self.target_pid, self.started_at, hangs, len(self.problems.as_list()))
            text = render(families(self.job, state))
        except Exception as exc:  # a bug of the exporter's costs the metrics, never the run
            self.problems.record(EXPOSITION_WHERE, exc, "the Prometheus metrics were not updated")
            return
        if self.server is not None:
            self.server.publish(text)
        if self.textfile is not None:
            try:
                self.textfile.write(text)
            except OSError as exc:  # a full or read-only disk, the directory removed: tried again next refresh
                self.problems.record(TEXTFILE_WHERE, exc, "node_exporter's textfile kept older values or none")

    def close(self) -> None:
        """The file removed, the port closed: a finished run's workers never look live."""
        if self.textfile is not None:
            try:
                self.textfile.remove()
            except OSError as exc:
                self.problems.record(TEXTFILE_WHERE, exc, f"{self.textfile.path} was left behind after the run")
        if self.server is not None:
            try:
                self.server.close()
            except Exception as exc:  # the run has ended: nothing of it depends on the endpoint any more
                self.problems.record(HTTP_WHERE, exc, "closing the endpoint failed")
