"""Samples the Python stacks of the training process and its workers from outside with `py-spy record`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from dlprobe.rundir import write_json

STACKS_FILE = "stacks.txt"  # py-spy's raw (collapsed) format: one line per distinct stack, with its count
STACKS_META_FILE = "stacks.json"
RATE_ENV = "DLPROBE_STACK_RATE"
DEFAULT_RATE = 20  # samples/s: enough to rank hotspots over a run, cheap enough to leave on


def find_py_spy() -> str | None:
    """py-spy next to this interpreter (a virtual environment's bin/) first, then on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


class StackRecorder:
    """Runs one `py-spy record --subprocesses --nonblocking` for the whole tree; never pauses the target."""

    def __init__(self, pid: int, run_dir: Path) -> None:
        self.pid = pid
        self.run_dir = run_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        try:
            self.rate = int(os.environ.get(RATE_ENV, DEFAULT_RATE))
        except ValueError:
            self.rate = DEFAULT_RATE
        self.started = False

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        exe = find_py_spy()
        if self.rate <= 0:
            self.error = f"stack sampling turned off ({RATE_ENV}={self.rate})"
            return
        if exe is None:
            self.error = "py-spy not found (pip install py-spy)"
            return
        command = [exe, "record", "--pid", str(self.pid), "--subprocesses", "--nonblocking", "--rate", str(self.rate),
                   "--format", "raw", "--output", str(self.run_dir / STACKS_FILE)]  # fmt: skip
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=(self.run_dir / "py-spy.log").open("wb"),
                start_new_session=True,  # a Ctrl-C for the script must not stop the sampler first
            )
        except OSError as exc:
            self.error = f"could not start py-spy: {exc}"

    def stop(self, wait_s: float = 5.0) -> None:
        """After the target exits py-spy writes its file and exits; make it do so if it does not."""
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)  # py-spy writes what it has on Ctrl-C
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.returncode not in (0, -signal.SIGINT) and not (self.run_dir / STACKS_FILE).exists():
                self.error = _log_tail(self.run_dir / "py-spy.log") or f"py-spy exited with {proc.returncode}"
        if self.started:
            write_json(self.run_dir / STACKS_META_FILE, {"rate": self.rate, "error": self.error})


def _log_tail(path: Path) -> str | None:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1][-500:] if lines else None
