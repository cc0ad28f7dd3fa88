"""A script killed by a signal ends `dlprobe run` as it ends plain python: the report is written, then dlprobe dies
of the same signal, so a parent sees returncode -N (not 128+N) and a shell stops its line after Ctrl-C."""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "COLUMNS": "120"}
KILLS_ITSELF = "import os, signal\nprint('started', flush=True)\nos.kill(os.getpid(), signal.{name})\n"
# Waits to be interrupted, as a training loop does; the test's SIGINT to the group stands in for Ctrl-C.
WAITS = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"


def _child_setup() -> None:
    # SIGINT's default action whatever this test process inherited (a suite started in the background by a
    # non-interactive shell ignores SIGINT, and so would every child), and no core file from SIGABRT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _probed(run_dir: Path, script: str) -> list[str]:
    return [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(run_dir), script]


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=180,
                          preexec_fn=_child_setup)  # fmt: skip


def _interrupted(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `command` in a process group of its own and press Ctrl-C (SIGINT to the whole group, as a terminal sends
    it) once the script says it is ready."""
    proc = subprocess.Popen(command, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_child_setup)  # fmt: skip
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first == "ready\n", first + (proc.stderr.read() if proc.stderr else "")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(command, proc.returncode, first + out, err)


def _line(command: list[str]) -> list[str]:
    """`COMMAND; echo NEXT` as a shell runs it."""
    return ["bash", "-c", f"{shlex.join(command)}; echo NEXT"]


def _assert_reported(run_dir: Path, name: str) -> None:
    assert json.loads((run_dir / "result.json").read_text())["signal"] == name
    report = json.loads((run_dir / "report.json").read_text())
    assert report["exit_code"] == 128 + signal.Signals[name].value  # the report still writes it as a shell does


@pytest.mark.parametrize("name", ["SIGTERM", "SIGABRT"])
def test_a_script_that_kills_itself_ends_dlprobe_by_the_same_signal(tmp_path: Path, name: str) -> None:
    script = tmp_path / "kills_itself.py"
    script.write_text(KILLS_ITSELF.format(name=name))
    plain = _run([sys.executable, str(script)], tmp_path)
    probed = _run(_probed(tmp_path / "run", str(script)), tmp_path)
    assert plain.returncode == -signal.Signals[name].value
    assert probed.returncode == plain.returncode, probed.stderr
    assert probed.stdout == plain.stdout == "started\n"
    assert "Traceback" not in probed.stderr
    _assert_reported(tmp_path / "run", name)


def test_ctrl_c_ends_dlprobe_by_sigint_as_it_ends_python(tmp_path: Path) -> None:
    script = tmp_path / "waits.py"
    script.write_text(WAITS)
    plain = _interrupted([sys.executable, str(script)], tmp_path)
    probed = _interrupted(_probed(tmp_path / "run", str(script)), tmp_path)
    assert plain.returncode == -signal.SIGINT  # python re-raises SIGINT on itself after the traceback
    assert probed.returncode == plain.returncode, probed.stderr
    assert probed.stderr.rstrip().splitlines()[-1] == "KeyboardInterrupt"
    _assert_reported(tmp_path / "run", "SIGINT")


def test_ctrl_c_stops_the_shells_line_as_plain_python_does(tmp_path: Path) -> None:
    # bash waits for a child that got the terminal's SIGINT with it: it goes on to the next command when the child
    # exited (it handled the Ctrl-C), and stops the line only when the child died of SIGINT.
    script = tmp_path / "waits.py"
    script.write_text(WAITS)
    plain = _interrupted(_line([sys.executable, str(script)]), tmp_path)
    probed = _interrupted(_line(_probed(tmp_path / "run", str(script))), tmp_path)
    assert plain.stdout == "ready\n" and plain.returncode == -signal.SIGINT
    assert probed.stdout == plain.stdout, probed.stderr
    assert probed.returncode == plain.returncode
    _assert_reported(tmp_path / "run", "SIGINT")
