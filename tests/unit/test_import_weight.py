"""The in-training hooks and the supervisor's entry points import nothing heavy when they are imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from dlprobe.rundir.schema import LAUNCH_SCRIPT
from dlprobe.supervisor import launch

# Imported into every training process (before the user's script's first line) and every DataLoader worker,
# so an import here costs every user start-up time and memory; torch is imported lazily where it is needed.
HEAVY = ("torch", "numpy", "matplotlib", "pandas")

_PROBE = textwrap.dedent(
    """
    import importlib, pkgutil, sys
    package, heavy = sys.argv[1], sys.argv[2].split(",")
    root = importlib.import_module(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in names:
        importlib.import_module(name)
        loaded = [h for h in heavy if h in sys.modules]
        if loaded:
            print(f"{name} imports {', '.join(loaded)}")
            break
    """
)


def heavy_imports(package: str) -> str:
    # A fresh interpreter: this test process has imported torch long ago
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, package, ",".join(HEAVY)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_in_training_modules_import_nothing_heavy() -> None:
    assert heavy_imports("dlprobe.in_training") == ""


def test_supervisor_modules_import_nothing_heavy() -> None:
    assert heavy_imports("dlprobe.supervisor") == ""


def _modules_after(code: str, *args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (which prints them, one per line)."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_dlprobe_run_reaches_the_target_start_without_typer_the_watch_or_the_report() -> None:
    # What `dlprobe run` imports before it starts the script is start-up time every run pays: the watch (psutil,
    # rich, the samplers) and the report are imported while the script runs (run_target.run_script, run_watch).
    loaded = _modules_after(
        "import sys, dlprobe.cli, dlprobe.commands.run_fast, dlprobe.supervisor.run_target; "
        "print(*sys.modules, sep='\\n')"
    )
    assert "dlprobe.supervisor.run_target" in loaded
    # nor typer: plain `dlprobe run` lines are parsed by commands/run_fast.py
    early = {"psutil", "rich", "typer", "dlprobe.supervisor.run_watch", "dlprobe.analysis", "dlprobe.console"}
    assert early & loaded == set()


def test_the_target_imports_only_what_starting_a_script_needs(tmp_path) -> None:
    # The hooks are imported before the user's first line: importlib.abc (and through it tempfile, shutil and the
    # compression modules), inspect and socket are needed only once a DataLoader exists, or never.
    script = tmp_path / "modules.py"
    script.write_text("import sys\nprint(*sys.modules, sep='\\n')\n")
    env = {**os.environ, "DLPROBE_RUN_DIR": str(tmp_path)}
    launch.inject(env, LAUNCH_SCRIPT, str(script))  # as `dlprobe run` starts it: this process is its supervisor
    proc = subprocess.run(
        launch.target_command(LAUNCH_SCRIPT, str(script), []), capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "dlprobe.in_training.hooks" in loaded
    assert {"importlib.abc", "inspect", "socket", "tempfile", "torch"} & loaded == set()
