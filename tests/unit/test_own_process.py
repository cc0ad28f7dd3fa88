"""dlprobe's own Python processes (the background plot) never import from the folder they are started in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlprobe import __version__
from dlprobe.own_process import python_module_command


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "python 3.10"])
def test_a_dlprobe_package_planted_in_the_current_directory_is_not_imported(tmp_path: Path, safe_path_flag) -> None:
    if safe_path_flag and sys.version_info < (3, 11):
        pytest.skip("-P needs python 3.11")
    marker = tmp_path / "PLANTED-RAN"
    (tmp_path / "dlprobe").mkdir()
    (tmp_path / "dlprobe" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    (tmp_path / "dlprobe" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    command = python_module_command("dlprobe", "--version", safe_path_flag=safe_path_flag)
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert __version__ in proc.stdout
    assert not marker.exists()
    # the plain `python -m` it replaces would have run the planted one
    plain = subprocess.run([sys.executable, "-m", "dlprobe", "--version"], cwd=tmp_path, capture_output=True)
    assert marker.exists(), plain
