"""The detached process that draws memory.png after `dlprobe run` (started by `render/plot.py:plot_in_background`).

`python -m dlprobe.commands.plot_process RUN_DIR DATA_FILE`: DATA_FILE is the private temporary file holding
`analysis/report/memory_plot.py:memory_plot`'s data, written by the run's report step and removed here once read. The
process imports matplotlib and the drawing, never the analysis nor the run's loading: it runs after every run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dlprobe import atomic
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import PLOT_FILE


def skip_artist_signatures() -> None:
    """As matplotlib imports, it builds the signature and docstring of `set()` for each of its ~100 Artist classes from
    every setter's docstring (`Artist.__init_subclass__`): 0.2 s of the 0.9 s that importing it costs. This process
    draws one PNG and never reads a signature or a docstring, so that step is skipped here (only here: not in
    `dlprobe report` nor in the Python API, where the importing program may read them). `set()` itself is unchanged:
    every Artist's is still `Artist.set`. Where a matplotlib lacks the step, nothing is replaced; a test checks the PNG
    is byte-for-byte the one drawn without this."""
    try:
        from matplotlib import artist
    except Exception:  # noqa: S110 - no matplotlib: plot_memory's own import says so in memory.png.error.txt
        return
    step = "_update_set_signature_and_docstring"  # matplotlib 3.x's name for it
    if callable(getattr(artist.Artist, step, None)):
        setattr(artist.Artist, step, classmethod(lambda cls: None))


def draw_saved_plot(run_dir: Path, data_file: Path) -> None:
    """Write memory.png atomically from the saved data; a failure goes to memory.png.error.txt (detached: no one
    reads this process's stderr, so the reason is kept in the run)."""
    files = RunDir(run_dir)
    partial = files.plot_partial
    try:
        try:
            data = json.loads(data_file.read_text())
        finally:
            data_file.unlink(missing_ok=True)
        from dlprobe.render.plot import plot_memory

        plot_memory(data, partial)
        os.replace(partial, files.plot)
    except Exception as exc:
        partial.unlink(missing_ok=True)
        atomic.write_text_atomic(files.plot_error, f"could not draw {PLOT_FILE}: {exc}\n")


if __name__ == "__main__":
    skip_artist_signatures()
    draw_saved_plot(Path(sys.argv[1]), Path(sys.argv[2]))
