"""The training cannot tell it is watched, and dlprobe's death never touches it: `dlprobe run` starts the script as
plain python does, with dlprobe's own terminal, pipes and files, and nothing of dlprobe's between them."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for_plot

# The console script, as a user runs it: `python -m dlprobe` would put the current directory on the supervisor's
# own path, which is the user's choice to make, not dlprobe's.
DLPROBE = [sys.executable, "-P", "-m", "dlprobe"] if sys.version_info >= (3, 11) else None
needs_safe_path = pytest.mark.skipif(DLPROBE is None, reason="needs python 3.11 for -P (the supervisor's own path)")
ENV = {**os.environ, "COLUMNS": "120"}


def _dlprobe(*args: str) -> list[str]:
    assert DLPROBE is not None
    return [*DLPROBE, *args]


def _wait_for(check, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not check():
        if time.time() > deadline:
            pytest.fail(f"never saw {what}")
        time.sleep(0.05)


def _under_a_terminal(command: list[str], cwd: Path) -> tuple[int, str]:
    """Run `command` with stdin, stdout and stderr on a new pseudo-terminal; its exit status and all it printed."""
    parent, child = pty.openpty()
    proc = subprocess.Popen(command, cwd=cwd, env=ENV, stdin=child, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    out = b""
    while True:
        try:
            data = os.read(parent, 65536)
        except OSError:  # EIO: every process holding the terminal has closed it
            break
        if not data:
            break
        out += data
    os.close(parent)
    return proc.wait(timeout=120), out.decode(errors="replace").replace("\r\n", "\n")


ISATTY = "import sys\nprint('isatty', sys.stdin.isatty(), sys.stdout.isatty(), sys.stderr.isatty())\n"


@needs_safe_path
def test_a_terminal_stays_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "tty.py").write_text(ISATTY)
    plain_code, plain = _under_a_terminal([sys.executable, "tty.py"], tmp_path)
    code, probed = _under_a_terminal(_dlprobe("run", "-q", "--out", str(tmp_path / "run"), "tty.py"), tmp_path)
    assert plain_code == code == 0
    assert plain == "isatty True True True\n"
    assert probed.splitlines()[0] == "isatty True True True", probed
    kept = json.loads((tmp_path / "run" / "result.json").read_text())["stderr"]
    assert kept == {"kind": "terminal", "written_bytes": None, "kept_bytes": 0, "problem": None}


LOUD = """
import pathlib, sys
for i in range(200_000):
    print(f"line {i}")
pathlib.Path(sys.argv[1]).write_text("the loop ran to its end")
"""


@needs_safe_path
def test_a_closed_pipe_reaches_the_script(tmp_path: Path) -> None:
    # `python loud.py | head -1`: the script dies of the broken pipe at its next print, as without dlprobe.
    (tmp_path / "loud.py").write_text(LOUD)

    def piped(command: list[str], marker: Path) -> tuple[int, int]:
        shell = f"{subprocess.list2cmdline(command)} {marker} | head -1; echo ${{PIPESTATUS[0]}}"
        out = subprocess.run(["bash", "-c", shell], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
        *lines, status = out.stdout.splitlines()
        return int(status), len(lines)

    plain = piped([sys.executable, "loud.py"], tmp_path / "plain-ended")
    probed = piped(_dlprobe("run", "-q", "--out", str(tmp_path / "run"), "loud.py"), tmp_path / "probed-ended")
    assert plain == probed == (120, 1) or plain == probed == (1, 1), (plain, probed)
    assert not (tmp_path / "plain-ended").exists() and not (tmp_path / "probed-ended").exists()


PLAIN_FACTS = """
import inspect, os, sys, warnings
print("file", __file__)
print("argv0", sys.argv[0])
print("path0", sys.path[0])
print("stack", [frame.filename for frame in inspect.stack()])
warnings.warn("where am I", stacklevel=2)
os.chdir("/")
print("next to me", open(os.path.join(os.path.dirname(__file__), "data.txt")).read())
"""


@needs_safe_path
def test_file_argv_path_stack_and_warnings_are_plain_pythons(tmp_path: Path) -> None:
    (tmp_path / "facts.py").write_text(PLAIN_FACTS)
    (tmp_path / "data.txt").write_text("found")
    plain = subprocess.run([sys.executable, "facts.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    probed = subprocess.run(
        _dlprobe("run", "-q", "--out", str(tmp_path / "run"), "facts.py"),
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert plain.returncode == probed.returncode == 0, probed.stderr
    assert f"file {tmp_path / 'facts.py'}\n" in plain.stdout  # python 3.9+ makes the main script's path absolute
    assert probed.stdout == plain.stdout
    assert f"stack ['{tmp_path / 'facts.py'}']" in probed.stdout  # no frame of dlprobe's (nor runpy's) under it
    assert "sys:1: UserWarning: where am I" in plain.stderr
    assert probed.stderr == plain.stderr  # -q: nothing of dlprobe's; the warning attributed where python puts it


PLANTED = "import pathlib\npathlib.Path({marker!r}).write_text('planted dlprobe imported')\n"


@needs_safe_path
def test_a_dlprobe_folder_planted_in_the_current_directory_is_never_imported(tmp_path: Path) -> None:
    marker = tmp_path / "PLANTED-RAN"
    (tmp_path / "dlprobe").mkdir()
    (tmp_path / "dlprobe" / "__init__.py").write_text(PLANTED.format(marker=str(marker)))
    (tmp_path / "dlprobe" / "commands").mkdir()
    (tmp_path / "dlprobe" / "commands" / "__init__.py").write_text("")
    for module in ("outputs", "plot_process"):  # the report step's, and the detached plot process's
        (tmp_path / "dlprobe" / "commands" / f"{module}.py").write_text(PLANTED.format(marker=str(marker)))
    module = "import sys\nfrom torch.utils.data import DataLoader\n"
    (tmp_path / "trainmod.py").write_text(module + "print('module ran', sys.argv[1:], list(DataLoader([1, 2])))\n")
    run_dir = tmp_path / "run"
    # not -q: the run ends with its report, and the plot drawn by a detached python -m dlprobe.commands.plot_process
    probed = subprocess.run(
        _dlprobe("run", "--out", str(run_dir), "-m", "trainmod", "a"),
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert probed.returncode == 0, probed.stderr
    assert probed.stdout == "module ran ['a'] [tensor([1]), tensor([2])]\n"  # -m finds the module in the cwd
    assert wait_for_plot(run_dir).exists()  # the plot process ran, from dlprobe's own path
    assert not marker.exists()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["script"], e["module"]) for e in events if e["ev"] == "start"] == [("trainmod", True)]


LEAVES_A_HELPER = """
import os, subprocess, sys
# A helper that outlives the script: it waits until dlprobe (the script's parent) is gone, then prints.
helper = '''
import os, pathlib, sys, time
supervisor = int(sys.argv[1])
while os.path.exists(f"/proc/{supervisor}"):
    time.sleep(0.05)
for i in range(31):
    print(f"helper line {i}", flush=True)
pathlib.Path(sys.argv[2]).write_text("done")
'''
subprocess.Popen([sys.executable, "-c", helper, str(os.getppid()), sys.argv[1]])
print("script done", flush=True)
"""


@needs_safe_path
def test_a_process_the_script_leaves_running_runs_on_with_its_output(tmp_path: Path) -> None:
    (tmp_path / "leaves.py").write_text(LEAVES_A_HELPER)
    marker, out = tmp_path / "helper-done", tmp_path / "out.txt"
    with out.open("wb") as sink:
        code = subprocess.run(
            _dlprobe("run", "-q", "--out", str(tmp_path / "run"), "leaves.py", str(marker)),
            cwd=tmp_path,
            env=ENV,
            stdout=sink,
            stderr=sink,
            timeout=180,
        ).returncode
    assert code == 0
    _wait_for(marker.exists, "the helper's end")
    lines = out.read_text().splitlines()
    assert lines[0] == "script done" and lines[1:] == [f"helper line {i}" for i in range(31)], lines


OUTLIVES_DLPROBE = """
import os, pathlib, sys, time
supervisor = os.getppid()

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

print("started", flush=True)
while alive(supervisor):
    time.sleep(0.05)
for i in range(1000):
    print(f"after dlprobe {i}")
print("script finished", flush=True)
sys.stderr.write("stderr still works\\n")
pathlib.Path(sys.argv[1]).write_text("done")
"""


@needs_safe_path
def test_the_script_runs_on_with_its_output_when_dlprobe_is_killed(tmp_path: Path) -> None:
    (tmp_path / "outlives.py").write_text(OUTLIVES_DLPROBE)
    marker, out, err = tmp_path / "script-done", tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            _dlprobe("run", "-q", "--out", str(tmp_path / "run"), "outlives.py", str(marker)),
            cwd=tmp_path,
            env=ENV,
            stdout=stdout,
            stderr=stderr,
        )
        try:
            _wait_for(lambda: out.read_text().startswith("started"), "the script's start")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            proc.kill()
    _wait_for(marker.exists, "the script's end")
    lines = out.read_text().splitlines()
    assert lines == ["started", *(f"after dlprobe {i}" for i in range(1000)), "script finished"]
    assert err.read_text().endswith("stderr still works\n")


OWN_EXCEPTHOOK = """
import sys
def mine(exc_type, exc, tb):
    print("the script's own hook:", exc_type.__name__, exc)
sys.excepthook = mine  # replaces the hook without calling the one before it
raise ValueError("bad config")
"""


def test_the_scripts_own_excepthook_is_kept_and_its_error_still_recorded(tmp_path: Path) -> None:
    (tmp_path / "hooked.py").write_text(OWN_EXCEPTHOOK)
    plain = subprocess.run([sys.executable, "hooked.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    run_dir = tmp_path / "run"
    probed = subprocess.run(
        [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(run_dir), "hooked.py"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert plain.returncode == probed.returncode == 1
    assert probed.stdout == plain.stdout == "the script's own hook: ValueError bad config\n"
    assert probed.stderr == plain.stderr == ""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    [error] = [e for e in events if e["ev"] == "script_error"]  # python set sys.last_value before calling its hook
    assert (error["type"], error["message"], error["line"]) == ("ValueError", "bad config", 6)


def test_ctrl_c_in_the_script_ends_it_as_python_does(tmp_path: Path) -> None:
    (tmp_path / "interrupted.py").write_text("raise KeyboardInterrupt\n")
    plain = subprocess.run([sys.executable, "interrupted.py"], cwd=tmp_path, capture_output=True, text=True)
    run_dir = tmp_path / "run"
    probed = subprocess.run(
        [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(run_dir), "interrupted.py"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert plain.returncode == -signal.SIGINT  # python re-raises SIGINT on itself after the traceback
    assert probed.returncode == -signal.SIGINT  # and so does dlprobe, once the report is written
    assert probed.stderr == plain.stderr and "KeyboardInterrupt" in plain.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert result["signal"] == "SIGINT"
    assert not [line for line in (run_dir / "events.jsonl").read_text().splitlines() if '"script_error"' in line]
