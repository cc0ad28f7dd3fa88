"""The detached process that draws memory.png after `dlprobe run` (started by `render/plot.py:plot_in_background`).

`python -m dlprobe.commands.plot_process RUN_DIR DATA_FILE`: DATA_FILE is the private temporary file holding
`analysis/memory_plot.py:memory_plot`'s data, written by the run's report step and removed here once read. The
process imports matplotlib and the drawing, never the analysis nor the run's loading: it runs after every run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dlprobe import atomic
from dlprobe.rundir.schema import PLOT_ERROR_FILE, PLOT_FILE, PLOT_PARTIAL_FILE


def draw_saved_plot(run_dir: Path, data_file: Path) -> None:
    """Write memory.png atomically from the saved data; a failure goes to memory.png.error.txt (detached: no one
    reads this process's stderr, so the reason is kept in the run)."""
    partial = run_dir / PLOT_PARTIAL_FILE
    try:
        try:
            data = json.loads(data_file.read_text())
        finally:
            data_file.unlink(missing_ok=True)
        from dlprobe.render.plot import plot_memory

        plot_memory(data, partial)
        os.replace(partial, run_dir / PLOT_FILE)
    except Exception as exc:
        partial.unlink(missing_ok=True)
        atomic.write_text_atomic(run_dir / PLOT_ERROR_FILE, f"could not draw {PLOT_FILE}: {exc}\n")


if __name__ == "__main__":
    draw_saved_plot(Path(sys.argv[1]), Path(sys.argv[2]))
