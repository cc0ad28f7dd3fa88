"""The supervisor's hang and dead-worker duties: one call per tick, one when the run is over."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from dlprobe.rundir.files import write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import KERNEL_FILE, STOP_REASON_HANG, Result
from dlprobe.supervisor.hang.elastic_hang import stop_stalled_rank
from dlprobe.supervisor.hang.stop import stop_tree
from dlprobe.supervisor.hang.watch import HangWatch
from dlprobe.supervisor.problems import Problems
from dlprobe.system import kernlog


class RunGuard:
    def __init__(
        self,
        run_dir: Path,
        child: subprocess.Popen[bytes],
        timeout_s: float,
        on_hang: str,
        notify: Callable[[str], None],
        problems: Problems | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.problems = problems if problems is not None else Problems()
        self.child = child
        self.watch = HangWatch(run_dir, child.pid, timeout_s, on_hang)
        self.notify = notify
        self.boot_start = kernlog.since_boot()
        self.kmsg_fd = kernlog.open_at_end()
        self.survivors: list[int] = []

    def _wait_main(self, timeout: float) -> bool:
        try:
            self.child.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def tick(
        self,
        now: float,
        pids: list[int],
        workers: dict[int, tuple[int, int, int]],
        mains: list[int] | None = None,
    ) -> None:
        """`workers`: worker pid -> (its main's pid, loader, worker id); `mains`: the processes that build loaders."""
        if self.watch.stopped:
            return
        before = self.watch.count
        stop = self.watch.check(now, pids, workers, mains)
        if self.watch.count == before:
            return
        saved = RunDir(self.run_dir).hang_record(self.watch.count)
        what = f"no batch for {self.watch.timeout_s:g}s: stacks and process states saved in {saved}; "
        if stop:
            self.notify(what + "stopping the run (--on-hang stop)")
            if self.watch.last_record is not None:  # a torchrun rank: its launcher ends the job, with its summary
                stop_stalled_rank(self.watch.last_record, self.run_dir, self.child.pid, self._wait_main, self.problems)
            self.survivors = stop_tree(self.child.pid, pids, self._wait_main)
        else:
            self.notify(what + "still waiting (--on-hang wait; --on-hang stop would end the run)")

    def _kernel_records(self) -> list[tuple[float, str]] | None:
        """The kernel's records since the run started; the whole ring buffer if that cursor could not be had."""
        if self.kmsg_fd is None:
            return kernlog.read_records()
        fd, self.kmsg_fd = self.kmsg_fd, None
        return kernlog.read_records(fd=fd)

    def finish(self, pids: set[int]) -> Result:
        """Look for OOM kills of our processes in the kernel log; the fields this adds to result.json."""
        try:
            kills = kernlog.oom_kills(pids, self.boot_start - 1.0, self._kernel_records())
            write_json(RunDir(self.run_dir).kernel, kills)
        except OSError as exc:  # without it an OOM kill reads as "something outside sent the signal": say so
            self.problems.record(
                f"{KERNEL_FILE} write",
                exc,
                "the kernel's OOM-kill records are missing, so a killed worker's cause may read as an outside signal",
            )
        fields: Result = {"hangs": self.watch.count}
        if self.watch.stopped:
            fields["stopped_by"] = "dlprobe: --on-hang stop"
            fields["stop_reason"] = STOP_REASON_HANG
            fields["survivors"] = self.survivors
        return fields
