"""An exception Python can only print ("Exception ignored in: ... __del__") shows no dlprobe frame (issue 42): the
iterator's __del__ runs dlprobe's wrapper of _shutdown_workers, a Ctrl-C there printed its frame."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dlprobe
from tests.conftest import SCRIPTS, run_dlprobe


def traceback_files(stderr: str) -> list[str]:
    return [line.split(",")[0].strip() for line in stderr.splitlines() if line.strip().startswith('File "')]


def test_an_ignored_exception_in_del_is_printed_as_python_prints_it(tmp_path):
    script = str(SCRIPTS / "shutdown_in_del.py")
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    probed = run_dlprobe(["run", "--quiet", "--out", str(tmp_path / "run"), script], tmp_path)
    assert plain.returncode == probed.returncode == 0, probed.stderr
    assert "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__" in probed.stderr
    assert "AttributeError: 'NoneType' object has no attribute 'set'" in probed.stderr
    package = str(Path(dlprobe.__file__).parent)  # the checkout's own folder may be named dlprobe too
    assert package not in "\n".join(traceback_files(probed.stderr)), probed.stderr
    assert traceback_files(probed.stderr) == traceback_files(plain.stderr)
    assert probed.stdout == plain.stdout
