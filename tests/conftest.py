"""Shared test helpers: run `python -m dlprobe` for real, in a subprocess, on scripts in tests/scripts/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


class DlprobeResult:
    def __init__(self, proc: subprocess.CompletedProcess[str], run_dir: Path) -> None:
        self.proc = proc
        self.run_dir = run_dir
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "report.json").read_text())

    def findings(self, code: str) -> list[dict[str, Any]]:
        return [f for f in self.report["findings"] if f["code"] == code]


def run_dlprobe(args: list[str], cwd: Path, timeout: float = 180, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    full_env = {**os.environ, "COLUMNS": "120", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dlprobe", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


@pytest.fixture
def probe(tmp_path: Path):
    """probe('script.py', *script_args, options=[...]) -> DlprobeResult of `dlprobe run`."""

    def _probe(script: str, *script_args: str, options: list[str] | None = None, **kw: Any) -> DlprobeResult:
        run_dir = tmp_path / "run"
        args = ["run", "--out", str(run_dir), *(options or []), str(SCRIPTS / script), *script_args]
        return DlprobeResult(run_dlprobe(args, tmp_path, **kw), run_dir)

    return _probe
