"""One py-spy lookup for the stall dumps and the hotspot sampler, honouring DLPROBE_PY_SPY."""

import os
import stat
import sys
from pathlib import Path

from dlprobe.supervisor.stack_recorder import StackRecorder
from dlprobe.system import pyspy


def _fake_binary(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_override_that_does_not_exist_disables_py_spy(monkeypatch):
    monkeypatch.setenv(pyspy.PY_SPY_ENV, "/nonexistent/py-spy")
    assert pyspy.find_py_spy() is None


def test_empty_override_disables_py_spy(monkeypatch):
    monkeypatch.setenv(pyspy.PY_SPY_ENV, "")
    assert pyspy.find_py_spy() is None


def test_override_picks_the_binary(monkeypatch, tmp_path):
    exe = _fake_binary(tmp_path / "my-py-spy")
    monkeypatch.setenv(pyspy.PY_SPY_ENV, str(exe))
    assert pyspy.find_py_spy() == str(exe)


def test_without_override_the_interpreter_s_bin_comes_before_path(monkeypatch, tmp_path):
    venv_bin = tmp_path / "venv" / "bin"
    on_path = tmp_path / "path"
    venv_bin.mkdir(parents=True)
    on_path.mkdir()
    _fake_binary(venv_bin / "py-spy")
    _fake_binary(on_path / "py-spy")
    monkeypatch.delenv(pyspy.PY_SPY_ENV, raising=False)
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    assert pyspy.find_py_spy() == str(venv_bin / "py-spy")
    (venv_bin / "py-spy").unlink()
    assert pyspy.find_py_spy() == str(on_path / "py-spy")


def test_hotspot_sampler_honours_the_override(monkeypatch, tmp_path):
    """The sampler used to look beside the interpreter and on PATH only, so DLPROBE_PY_SPY could not turn it off."""
    monkeypatch.setenv(pyspy.PY_SPY_ENV, "/nonexistent/py-spy")
    recorder = StackRecorder(os.getpid(), tmp_path)
    recorder.start()
    assert recorder.proc is None
    assert recorder.error is not None and "py-spy not found" in recorder.error
