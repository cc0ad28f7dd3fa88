"""The in-training hooks and the supervisor's entry points import nothing heavy when they are imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Imported into every training process (bootstrap runs before the user's script) and every DataLoader worker,
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
