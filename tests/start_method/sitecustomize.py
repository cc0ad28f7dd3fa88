"""Makes $DLPROBE_TEST_START_METHOD the default start method of every Python process the tests start."""

# benchmarks/compat_matrix.py puts this folder on PYTHONPATH, so the scripts under test keep their
# `DataLoader(..., num_workers=N)` unchanged and still start their workers by spawn or forkserver, as they would under
# Python 3.14 (forkserver by default on Linux). A loader that names its own multiprocessing_context is left alone.
import os

_method = os.environ.get("DLPROBE_TEST_START_METHOD")
if _method:
    import multiprocessing

    multiprocessing.set_start_method(_method, force=True)
