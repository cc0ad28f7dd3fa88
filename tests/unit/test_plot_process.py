"""The detached plot process of `dlprobe run` (commands/plot_process.py): it draws memory.png from the data the
report step saved for it, removes that file, and imports neither the analysis nor the run's loading."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from dlprobe.analysis.report.memory_plot import memory_plot
from dlprobe.analysis.run.model import load_run
from dlprobe.commands.plot_process import draw_saved_plot
from dlprobe.rundir.schema import PLOT_ERROR_FILE, PLOT_FILE, PLOT_PARTIAL_FILE
from tests.damage import FIXTURES

# Runs the process's module as `python -m` does, then names every dlprobe.analysis module it imported.
_IMPORTED = (
    "import runpy, sys; sys.argv = ['plot_process', *sys.argv[1:]]; "
    "runpy.run_module('dlprobe.commands.plot_process', run_name='__main__', alter_sys=True); "
    "print(sorted(m for m in sys.modules if m.startswith('dlprobe.analysis')))"
)


def _saved_plot(tmp_path: Path) -> tuple[Path, Path]:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    data_file = tmp_path / "plot-data.json"
    data_file.write_text(json.dumps(memory_plot(load_run(run_dir))))
    return run_dir, data_file


def test_the_plot_process_draws_from_the_saved_data_removes_it_and_never_imports_the_analysis(tmp_path):
    run_dir, data_file = _saved_plot(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTED, str(run_dir), str(data_file)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"  # about half a second of CPU after every run, before this split
    assert (run_dir / PLOT_FILE).read_bytes().startswith(b"\x89PNG")
    assert not data_file.exists()
    assert not (run_dir / PLOT_PARTIAL_FILE).exists() and not (run_dir / PLOT_ERROR_FILE).exists()


def test_data_it_cannot_draw_is_written_down_and_the_file_still_removed(tmp_path):
    run_dir, data_file = _saved_plot(tmp_path)
    data_file.write_text('{"processes": "cut sh')
    draw_saved_plot(run_dir, data_file)
    assert "could not draw memory.png" in (run_dir / PLOT_ERROR_FILE).read_text()
    assert not data_file.exists()
    assert not (run_dir / PLOT_FILE).exists() and not (run_dir / PLOT_PARTIAL_FILE).exists()


# Draws memory.png as the plot process does, with or without skipping matplotlib's set() signatures.
_DRAW = (
    "import sys; from pathlib import Path; from dlprobe.commands import plot_process as p; "
    "(p.skip_artist_signatures() if sys.argv[3] == 'skip' else None); "
    "p.draw_saved_plot(Path(sys.argv[1]), Path(sys.argv[2])); "
    "import matplotlib.lines; print(hasattr(matplotlib.lines.Line2D.set, '__signature__'))"
)


def test_skipping_matplotlibs_set_signatures_draws_the_same_png(tmp_path):
    """The plot process skips the signatures and docstrings matplotlib builds for every Artist's set() as it imports
    (0.2 s of CPU after every run): the step is really skipped, and memory.png is byte-for-byte what it was."""
    drawn = {}
    for mode in ("skip", "plain"):
        run_dir, data_file = _saved_plot(tmp_path / mode)
        command = [sys.executable, "-c", _DRAW, str(run_dir), str(data_file), mode]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        drawn[mode] = (proc.stdout.strip(), (run_dir / PLOT_FILE).read_bytes())
    assert drawn["skip"][0] == "False" and drawn["plain"][0] == "True"  # skipped, and only where asked
    assert drawn["skip"][1] == drawn["plain"][1]
